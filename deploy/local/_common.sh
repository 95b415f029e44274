# shellcheck shell=bash
# Shared by kafka-up.sh, kafka-down.sh, kafka-status.sh and the secured broker's
# kafka-up-secure.sh / kafka-down-secure.sh (sourced, not run).

KAFKA_LOCAL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$KAFKA_LOCAL_DIR/../.." && pwd)"
LIB_DIR="$KAFKA_LOCAL_DIR/lib"
STAMP="$LIB_DIR/.stamp"

# Resolve KAFKA_DATA_DIR to an absolute path without creating it.
_data_dir="${KAFKA_DATA_DIR:-$REPO_ROOT/var/kafka}"
case "$_data_dir" in
  /*) DATA_DIR="$_data_dir" ;;
  *) DATA_DIR="$PWD/$_data_dir" ;;
esac
DATA_DIR="${DATA_DIR%/}"
[ -n "$DATA_DIR" ] || { echo "KAFKA_DATA_DIR must not be /" >&2; exit 2; }
unset _data_dir

PORT_FILE="$DATA_DIR/kafka.ports"   # "<port> <controller port> [<nodes>]" of the running cluster
LOCK_FILE="$DATA_DIR/.lock"

# The files of one node. 0 is the single-node broker, whose files sit in the data dir itself;
# node N of a multi-node cluster (KAFKA_NODES > 1) keeps its own in <data dir>/node-N/.
# Sets NODE_DIR PROPS PID_FILE LOG_DIRS LOG_FILE OUT_FILE.
node_paths() {
  if [ "$1" = 0 ]; then NODE_DIR="$DATA_DIR"; else NODE_DIR="$DATA_DIR/node-$1"; fi
  PROPS="$NODE_DIR/server.properties"
  PID_FILE="$NODE_DIR/kafka.pid"
  LOG_DIRS="$NODE_DIR/data"            # Kafka's log.dirs (and KRaft metadata log)
  LOG_FILE="$NODE_DIR/kafka.log"       # log4j2 (rolled at 20 MB, 5 kept)
  OUT_FILE="$NODE_DIR/kafka.out"       # JVM stdout/stderr (normally near empty)
}
node_paths 0

now() { echo "${EPOCHREALTIME/,/.}"; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

kafka_version() {
  local j
  for j in "$LIB_DIR"/kafka_2.13-*.jar; do
    [ -e "$j" ] || { echo "unknown"; return; }
    j="${j##*/kafka_2.13-}"; echo "${j%.jar}"; return
  done
}

# The ports of the broker this data dir runs (or last ran); env overrides win.
# Sets REC_PORT / REC_CTRL_PORT (empty when unknown), REC_NODES (1 when unknown),
# KAFKA_PORT and KAFKA_CONTROLLER_PORT.
recorded_ports() {
  REC_PORT=""; REC_CTRL_PORT=""; REC_NODES=""
  if [ -r "$PORT_FILE" ]; then read -r REC_PORT REC_CTRL_PORT REC_NODES < "$PORT_FILE" || true; fi
  [[ "$REC_NODES" =~ ^[1-9][0-9]?$ ]] || REC_NODES=1
  KAFKA_PORT="${KAFKA_PORT:-${REC_PORT:-9092}}"
  KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-${REC_CTRL_PORT:-9093}}"
}

# Ports of node $1 (1..n) of a cluster: client KAFKA_PORT + 2(N-1), controller
# KAFKA_CONTROLLER_PORT + 2(N-1); with the defaults 9092/9093, 9094/9095, 9096/9097.
node_port() { echo $(( KAFKA_PORT + 2 * ($1 - 1) )); }
node_ctrl_port() { echo $(( KAFKA_CONTROLLER_PORT + 2 * ($1 - 1) )); }

# "127.0.0.1:<port>,..." for $1 nodes (1: the single broker)
bootstrap_list() {
  local n="$1" i out=""
  for ((i = 1; i <= n; i++)); do out+="${out:+,}127.0.0.1:$(node_port "$i")"; done
  echo "$out"
}

# Is $1 the pid of the broker started for this data dir?
is_our_pid() {
  local pid="$1" cmd
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/cmdline" ] || return 1
  cmd="$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)" || return 1
  [[ "$cmd" == *" kafka.Kafka $PROPS"* ]]
}

# Print the pid of our running broker (pid file first, else look for its exact command line).
find_pid() {
  local pid=""
  if [ -r "$PID_FILE" ]; then read -r pid < "$PID_FILE" || true; fi
  if is_our_pid "$pid"; then echo "$pid"; return 0; fi
  for pid in $(pgrep -f -- " kafka.Kafka $PROPS\$" 2>/dev/null || true); do
    if is_our_pid "$pid"; then echo "$pid"; return 0; fi
  done
  return 1
}

# A real Metadata request (v4, no topics) over bash /dev/tcp: succeeds only when the broker
# answers with itself in the broker list. Prints "node <id> at <host>:<port>, cluster <id>"
# (and ", <n> brokers" when the cluster has more than one).
probe_metadata() {
  local port="$1" raw
  raw="$(timeout 3 bash -c '
      exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
      # size=20 | api_key=3 (Metadata) v4 | correlation_id=0x4b4c | client_id "probe"
      # | topics=[] | allow_auto_topic_creation=false
      printf "\x00\x00\x00\x14\x00\x03\x00\x04\x00\x00\x4b\x4c\x00\x05probe\x00\x00\x00\x00\x00" >&3
      set -- $(head -c 4 <&3 | od -An -v -tu1)
      [ $# -eq 4 ] || exit 1
      n=$(( ($1 << 24) | ($2 << 16) | ($3 << 8) | $4 ))
      [ "$n" -gt 0 ] && [ "$n" -lt 1048576 ] || exit 1
      head -c "$n" <&3 | od -An -v -tu1
    ' probe "$port" 2>/dev/null)" || return 1
  local -a b
  read -r -a b <<< "$(echo $raw)"
  local len=${#b[@]} i=0
  i32() { echo $(( (b[$1] << 24) | (b[$1+1] << 16) | (b[$1+2] << 8) | b[$1+3] )); }
  i16() { echo $(( (b[$1] << 8) | b[$1+1] )); }
  str() { local s="" k; for ((k = $1; k < $1 + $2; k++)); do s+="$(printf "\\$(printf %03o "${b[k]}")")"; done; echo "$s"; }
  [ "$len" -ge 16 ] || return 1
  [ "$(i32 0)" -eq $((0x4b4c)) ] || return 1            # correlation id
  local nb; nb=$(i32 8); i=12                             # throttle_time_ms at 4, brokers at 8
  [ "$nb" -ge 1 ] && [ "$nb" -lt 1000 ] || return 1
  [ $((i + 6)) -le "$len" ] || return 1
  local k node hl bport rl cl cluster me=""
  for ((k = 0; k < nb; k++)); do                          # brokers: id, host, port, rack
    [ $((i + 6)) -le "$len" ] || return 1
    node=$(i32 $i); hl=$(i16 $((i + 4))); i=$((i + 6))
    [ "$hl" -lt 32768 ] && [ $((i + hl + 6)) -le "$len" ] || return 1
    bport=$(i32 $((i + hl)))
    [ -z "$me" ] && [ "$bport" -eq "$port" ] && me="node $node at $(str $i "$hl"):$bport"
    i=$((i + hl)); rl=$(i16 $((i + 4))); i=$((i + 6))
    if [ "$rl" -ne 65535 ]; then i=$((i + rl)); fi
  done
  [ -n "$me" ] || return 1                                # it must list itself
  cluster="?"
  if [ $((i + 2)) -le "$len" ]; then
    cl=$(i16 $i); i=$((i + 2))
    if [ "$cl" -ne 65535 ] && [ $((i + cl)) -le "$len" ]; then cluster=$(str $i "$cl"); fi
  fi
  if [ "$nb" -eq 1 ]; then echo "$me, cluster $cluster"; else echo "$me, cluster $cluster, $nb brokers"; fi
}

port_in_use() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }

log_tail() {
  local f
  for f in "$OUT_FILE" "$LOG_FILE"; do
    [ -s "$f" ] || continue
    echo "----- last lines of $f -----" >&2
    tail -n "${1:-40}" "$f" >&2
  done
}

# KAFKA_NODES checked: 1 (the default: one broker, files in the data dir) or 2..9 nodes.
valid_nodes() { [[ "$1" =~ ^[1-9]$ ]]; }

# The node slots of a cluster of $1 nodes: "0" for one node, "1 2 3" for three.
node_slots() {
  if [ "$1" -eq 1 ]; then echo 0; else seq 1 "$1" | tr '\n' ' '; fi
}

# The slots whose broker runs now, from this data dir: the single-node broker (0) and any
# node-N/ of a cluster, whatever KAFKA_NODES says.
running_slots() {
  local d n out=""
  node_paths 0; if find_pid >/dev/null; then out="0"; fi
  for d in "$DATA_DIR"/node-[0-9]*; do
    [ -d "$d" ] || continue
    n="${d##*/node-}"; [[ "$n" =~ ^[0-9]+$ ]] || continue
    node_paths "$n"; if find_pid >/dev/null; then out+="${out:+ }$n"; fi
  done
  node_paths 0
  echo "$out"
}

# Client / controller port of a slot (0 is the single broker: KAFKA_PORT itself).
slot_port() { if [ "$1" = 0 ]; then echo "$KAFKA_PORT"; else node_port "$1"; fi; }
slot_ctrl_port() { if [ "$1" = 0 ]; then echo "$KAFKA_CONTROLLER_PORT"; else node_ctrl_port "$1"; fi; }
slot_name() { if [ "$1" = 0 ]; then echo "broker"; else echo "node $1"; fi; }

# The jars in lib/: fetched with Maven ($MVN, default mvn) when lib/ is missing, incomplete or
# older than pom.xml (lib/.stamp records a complete copy for the pom's hash). $1 names the
# caller in messages; Maven's output goes to $DATA_DIR/mvn.log. kafka-up.sh and
# kafka-up-secure.sh share lib/, so a fetch holds <repo>/var/.kafka-lib.lock.
ensure_jars() {
  local who="$1" pom_hash t
  pom_hash="$(sha256sum "$KAFKA_LOCAL_DIR/pom.xml" | cut -d' ' -f1)"
  _lib_ok() {
    [ -r "$STAMP" ] || return 1
    [ "$(head -n1 "$STAMP")" = "pom-sha256 $pom_hash" ] || return 1
    local j
    while read -r j; do [ -s "$LIB_DIR/$j" ] || return 1; done < <(tail -n +2 "$STAMP")
  }
  _lib_ok && return 0
  mkdir -p "$REPO_ROOT/var" "$DATA_DIR"
  exec 8>"$REPO_ROOT/var/.kafka-lib.lock"
  flock -w 600 8 || { echo "$who: another fetch of $LIB_DIR holds $REPO_ROOT/var/.kafka-lib.lock" >&2; return 1; }
  if ! _lib_ok; then  # (another script may have fetched them while this one waited)
    echo "$who: fetching Kafka jars with Maven into $LIB_DIR ..."
    t="$(now)"
    rm -rf "$LIB_DIR"
    if ! "${MVN:-mvn}" -B -q -f "$KAFKA_LOCAL_DIR/pom.xml" dependency:copy-dependencies \
          -DoutputDirectory="$LIB_DIR" >"$DATA_DIR/mvn.log" 2>&1; then
      echo "$who: mvn failed (full output in $DATA_DIR/mvn.log):" >&2
      tail -n 40 "$DATA_DIR/mvn.log" >&2
      exec 8>&-; return 1
    fi
    ls "$LIB_DIR"/kafka_2.13-*.jar "$LIB_DIR"/kafka-tools-*.jar "$LIB_DIR"/log4j-core-*.jar >/dev/null
    { echo "pom-sha256 $pom_hash"; (cd "$LIB_DIR" && ls -1 -- *.jar); } > "$STAMP.tmp"
    mv "$STAMP.tmp" "$STAMP"
    echo "$who: fetched $(($(wc -l < "$STAMP") - 1)) jars in $(elapsed "$t")s"
  fi
  exec 8>&-
}
