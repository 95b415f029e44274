#!/usr/bin/env bash
# Start the local single-node Apache Kafka (KRaft, broker+controller) on 127.0.0.1 and wait
# until it answers a Metadata request. Idempotent: a no-op when it is already up.
#   env: KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT (9093), KAFKA_DATA_DIR (<repo>/var/kafka),
#        KAFKA_HEAP_OPTS ("-Xmx1G -Xms256m"), KAFKA_START_TIMEOUT (90 s), JAVA, MVN
set -euo pipefail
# shellcheck source=_common.sh
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
T0="$(now)"

START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx1G -Xms256m}"
JAVA="${JAVA:-java}"
MVN="${MVN:-mvn}"

mkdir -p "$DATA_DIR"
exec 9>"$LOCK_FILE"
flock -w 120 9 || { echo "kafka-up: another kafka-up/kafka-down holds $LOCK_FILE" >&2; exit 1; }

recorded_ports
BOOTSTRAP="127.0.0.1:$KAFKA_PORT"

wait_ready() {  # $1 pid; waits until the broker answers, the process dies, or the timeout
  local pid="$1" deadline info
  deadline=$(( $(date +%s) + START_TIMEOUT ))
  while :; do
    if info="$(probe_metadata "$KAFKA_PORT")"; then echo "$info"; return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "kafka-up: the broker (pid $pid) exited during start-up" >&2; log_tail 60; return 1
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "kafka-up: the broker (pid $pid) did not answer on $BOOTSTRAP within ${START_TIMEOUT}s" >&2
      log_tail 60; return 1
    fi
    sleep 0.25
  done
}

if pid="$(find_pid)"; then
  echo "$pid" > "$PID_FILE"
  # the broker this data dir already runs keeps its ports; asking for others is an error
  if { [ -n "$REC_PORT" ] && [ "$REC_PORT" != "$KAFKA_PORT" ]; } ||
     { [ -n "$REC_CTRL_PORT" ] && [ "$REC_CTRL_PORT" != "$KAFKA_CONTROLLER_PORT" ]; }; then
    echo "kafka-up: the broker for $DATA_DIR already runs (pid $pid) on ports" \
         "$REC_PORT/$REC_CTRL_PORT, not $KAFKA_PORT/$KAFKA_CONTROLLER_PORT;" \
         "run kafka-down.sh first to change ports" >&2
    exit 1
  fi
  if info="$(probe_metadata "$KAFKA_PORT")"; then
    echo "kafka-up: already up (pid $pid, Kafka $(kafka_version), $info) - nothing to do"
    echo "bootstrap: $BOOTSTRAP"
    exit 0
  fi
  echo "kafka-up: broker process $pid is running but not answering yet; waiting up to ${START_TIMEOUT}s"
  info="$(wait_ready "$pid")" || exit 1
  echo "kafka-up: up (pid $pid, Kafka $(kafka_version), $info) after waiting $(elapsed "$T0")s"
  echo "bootstrap: $BOOTSTRAP"
  exit 0
fi

for p in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT"; do
  if port_in_use "$p"; then
    echo "kafka-up: port 127.0.0.1:$p is already in use by another process:" >&2
    ss -Hltnp "sport = :$p" >&2 || true
    echo "(set KAFKA_PORT / KAFKA_CONTROLLER_PORT to use other ports)" >&2
    exit 1
  fi
done

# 1. jars: fetched with Maven when lib/ is missing, incomplete or older than pom.xml.
pom_hash="$(sha256sum "$KAFKA_LOCAL_DIR/pom.xml" | cut -d' ' -f1)"
lib_ok() {
  [ -r "$STAMP" ] || return 1
  [ "$(head -n1 "$STAMP")" = "pom-sha256 $pom_hash" ] || return 1
  local j
  while read -r j; do [ -s "$LIB_DIR/$j" ] || return 1; done < <(tail -n +2 "$STAMP")
}
if ! lib_ok; then
  echo "kafka-up: fetching Kafka jars with Maven into $LIB_DIR ..."
  t="$(now)"
  rm -rf "$LIB_DIR"
  if ! "$MVN" -B -q -f "$KAFKA_LOCAL_DIR/pom.xml" dependency:copy-dependencies \
        -DoutputDirectory="$LIB_DIR" >"$DATA_DIR/mvn.log" 2>&1; then
    echo "kafka-up: mvn failed (full output in $DATA_DIR/mvn.log):" >&2
    tail -n 40 "$DATA_DIR/mvn.log" >&2
    exit 1
  fi
  ls "$LIB_DIR"/kafka_2.13-*.jar "$LIB_DIR"/kafka-tools-*.jar "$LIB_DIR"/log4j-core-*.jar >/dev/null
  { echo "pom-sha256 $pom_hash"; (cd "$LIB_DIR" && ls -1 -- *.jar); } > "$STAMP.tmp"
  mv "$STAMP.tmp" "$STAMP"
  echo "kafka-up: fetched $(($(wc -l < "$STAMP") - 1)) jars in $(elapsed "$t")s"
fi
VERSION="$(kafka_version)"

# 2. server.properties, rendered on every start (ports and paths may change)
mkdir -p "$LOG_DIRS"
sed -e "s|@KAFKA_PORT@|$KAFKA_PORT|g" \
    -e "s|@KAFKA_CONTROLLER_PORT@|$KAFKA_CONTROLLER_PORT|g" \
    -e "s|@LOG_DIRS@|$LOG_DIRS|g" \
    "$KAFKA_LOCAL_DIR/server.properties.template" > "$PROPS.tmp"
mv "$PROPS.tmp" "$PROPS"

JVM_OPTS=(
  $HEAP_OPTS
  -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
  -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
  -Dlog4j2.configurationFile="$KAFKA_LOCAL_DIR/log4j2.properties"
  -Dkafka.logs.dir="$DATA_DIR"
)

# 3. format the KRaft log dir once (static controller.quorum.voters: -t and -c are enough)
if [ ! -s "$LOG_DIRS/meta.properties" ]; then
  t="$(now)"
  cluster_id="$("$JAVA" -cp "$LIB_DIR/*" -Dlog4j2.configurationFile="$KAFKA_LOCAL_DIR/log4j2.properties" \
      -Dkafka.logs.dir="$DATA_DIR" kafka.tools.StorageTool random-uuid)"
  echo "$cluster_id" > "$DATA_DIR/cluster.id"
  if ! "$JAVA" -cp "$LIB_DIR/*" -Dlog4j2.configurationFile="$KAFKA_LOCAL_DIR/log4j2.properties" \
      -Dkafka.logs.dir="$DATA_DIR" kafka.tools.StorageTool format --ignore-formatted \
      -t "$cluster_id" -c "$PROPS" > "$DATA_DIR/format.log" 2>&1; then
    echo "kafka-up: formatting $LOG_DIRS failed:" >&2; cat "$DATA_DIR/format.log" >&2; exit 1
  fi
  echo "kafka-up: formatted $LOG_DIRS (cluster id $cluster_id) in $(elapsed "$t")s"
fi

# 4. start in the background, detached from this shell's session
t="$(now)"
echo "$KAFKA_PORT $KAFKA_CONTROLLER_PORT" > "$PORT_FILE"
{
  echo "===== $(date -Is) starting Kafka $VERSION: $PROPS"
} >> "$OUT_FILE"
(
  exec 9>&-   # don't hand the lock to the broker
  cd "$DATA_DIR"
  exec setsid nohup "$JAVA" "${JVM_OPTS[@]}" -cp "$LIB_DIR/*" kafka.Kafka "$PROPS" \
    >> "$OUT_FILE" 2>&1 < /dev/null
) &
pid=$!
echo "$pid" > "$PID_FILE"

if ! info="$(wait_ready "$pid")"; then
  if kill -0 "$pid" 2>/dev/null; then
    echo "kafka-up: stopping the unresponsive broker (pid $pid)" >&2
    kill -TERM "$pid" 2>/dev/null || true
  fi
  exit 1
fi
echo "kafka-up: Kafka $VERSION up (pid $pid, $info)"
echo "kafka-up: broker answered $(elapsed "$t")s after launch; kafka-up took $(elapsed "$T0")s in all"
echo "kafka-up: log $LOG_FILE, data $LOG_DIRS"
echo "bootstrap: $BOOTSTRAP"
