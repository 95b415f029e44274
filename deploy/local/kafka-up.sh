#!/usr/bin/env bash
# Start the local Apache Kafka (KRaft, broker+controller) on 127.0.0.1 and wait until it
# answers a Metadata request. One node by default; KAFKA_NODES=3 starts a three-node cluster
# (ports KAFKA_PORT, +2, +4; controllers KAFKA_CONTROLLER_PORT, +2, +4; RF 3, min ISR 2).
# Idempotent: a no-op when it is already up (and a cluster node that is down is started).
#   env: KAFKA_NODES (1), KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT (9093),
#        KAFKA_DATA_DIR (<repo>/var/kafka), KAFKA_HEAP_OPTS ("-Xmx1G -Xms256m"),
#        KAFKA_START_TIMEOUT (90 s), JAVA, MVN
set -euo pipefail
# shellcheck source=_common.sh
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
T0="$(now)"

START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx1G -Xms256m}"
JAVA="${JAVA:-java}"
MVN="${MVN:-mvn}"
if [ -n "${KAFKA_NODES:-}" ] && ! valid_nodes "$KAFKA_NODES"; then
  echo "kafka-up: KAFKA_NODES must be 1..9, got '$KAFKA_NODES'" >&2; exit 2
fi

mkdir -p "$DATA_DIR"
exec 9>"$LOCK_FILE"
flock -w 120 9 || { echo "kafka-up: another kafka-up/kafka-down holds $LOCK_FILE" >&2; exit 1; }

recorded_ports
RUNNING="$(running_slots)"
# KAFKA_NODES unset: the running cluster's size, else one node
NODES="${KAFKA_NODES:-$([ -n "$RUNNING" ] && echo "$REC_NODES" || echo 1)}"
ALL_SLOTS="$(node_slots "$NODES")"
SLOTS="$ALL_SLOTS"
# kafka-node.sh start N: only that node of the cluster is started and awaited
if [ -n "${_KAFKA_UP_ONLY_NODE:-}" ]; then
  case " $SLOTS " in
    *" $_KAFKA_UP_ONLY_NODE "*) SLOTS="$_KAFKA_UP_ONLY_NODE" ;;
    *) echo "kafka-up: no node $_KAFKA_UP_ONLY_NODE in a $NODES-node cluster" >&2; exit 2 ;;
  esac
fi
BOOTSTRAP="$(bootstrap_list "$NODES")"

wait_ready() {  # $1 slot, $2 pid; waits until it answers, the process dies, or the timeout
  local slot="$1" pid="$2" port deadline info
  port="$(slot_port "$slot")"; node_paths "$slot"
  deadline=$(( $(date +%s) + START_TIMEOUT ))
  while :; do
    if info="$(probe_metadata "$port")"; then echo "$info"; return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "kafka-up: the $(slot_name "$slot") (pid $pid) exited during start-up" >&2; log_tail 60; return 1
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "kafka-up: the $(slot_name "$slot") (pid $pid) did not answer on 127.0.0.1:$port within ${START_TIMEOUT}s" >&2
      log_tail 60; return 1
    fi
    sleep 0.25
  done
}

if [ -n "$RUNNING" ]; then
  # what this data dir already runs keeps its ports and size; asking for others is an error
  if { [ -n "$REC_PORT" ] && [ "$REC_PORT" != "$KAFKA_PORT" ]; } ||
     { [ -n "$REC_CTRL_PORT" ] && [ "$REC_CTRL_PORT" != "$KAFKA_CONTROLLER_PORT" ]; }; then
    echo "kafka-up: the broker for $DATA_DIR already runs (slots $RUNNING) on ports" \
         "$REC_PORT/$REC_CTRL_PORT, not $KAFKA_PORT/$KAFKA_CONTROLLER_PORT;" \
         "run kafka-down.sh first to change ports" >&2
    exit 1
  fi
  for s in $RUNNING; do
    case " $ALL_SLOTS " in *" $s "*) continue ;; esac
    echo "kafka-up: $DATA_DIR already runs a $REC_NODES-node cluster (slots $RUNNING), not $NODES;" \
         "run kafka-down.sh first to change KAFKA_NODES" >&2
    exit 1
  done
fi

# Which slots need a start; the running ones are re-checked (and awaited if still starting).
TO_START=""
declare -A PIDS=()
for s in $SLOTS; do
  node_paths "$s"
  if pid="$(find_pid)"; then
    echo "$pid" > "$PID_FILE"; PIDS[$s]="$pid"
  else
    TO_START+="${TO_START:+ }$s"
  fi
done

if [ -z "$TO_START" ]; then
  all_up=1; infos=()
  for s in $SLOTS; do
    if info="$(probe_metadata "$(slot_port "$s")")"; then infos+=("$info"); else all_up=0; fi
  done
  if [ "$all_up" = 1 ]; then
    if [ "$NODES" = 1 ]; then
      echo "kafka-up: already up (pid ${PIDS[0]}, Kafka $(kafka_version), ${infos[0]}) - nothing to do"
    else
      echo "kafka-up: already up (node$([ "${SLOTS// /}" != "$SLOTS" ] && echo s) ${SLOTS% } of $NODES, Kafka $(kafka_version)) - nothing to do"
      for info in "${infos[@]}"; do echo "kafka-up:   $info"; done
    fi
    echo "bootstrap: $BOOTSTRAP"
    exit 0
  fi
  for s in $SLOTS; do
    pid="${PIDS[$s]}"
    probe_metadata "$(slot_port "$s")" >/dev/null && continue
    echo "kafka-up: $(slot_name "$s") process $pid is running but not answering yet; waiting up to ${START_TIMEOUT}s"
    info="$(wait_ready "$s" "$pid")" || exit 1
    echo "kafka-up: up ($([ "$s" = 0 ] || echo "node $s ")pid $pid, Kafka $(kafka_version), $info) after waiting $(elapsed "$T0")s"
  done
  echo "bootstrap: $BOOTSTRAP"
  exit 0
fi

# every port of the cluster must be free but those of its running nodes, and distinct
declare -A SEEN=()
for s in $ALL_SLOTS; do
  for p in "$(slot_port "$s")" "$(slot_ctrl_port "$s")"; do
    if [ "$p" -lt 1 ] || [ "$p" -gt 65535 ] || [ -n "${SEEN[$p]:-}" ]; then
      echo "kafka-up: port $p is out of range or used twice by this cluster" \
           "(KAFKA_PORT=$KAFKA_PORT KAFKA_CONTROLLER_PORT=$KAFKA_CONTROLLER_PORT KAFKA_NODES=$NODES)" >&2
      exit 2
    fi
    SEEN[$p]=1
  done
done
for s in $TO_START; do
  for p in "$(slot_port "$s")" "$(slot_ctrl_port "$s")"; do
    if port_in_use "$p"; then
      echo "kafka-up: port 127.0.0.1:$p is already in use by another process:" >&2
      ss -Hltnp "sport = :$p" >&2 || true
      echo "(set KAFKA_PORT / KAFKA_CONTROLLER_PORT to use other ports)" >&2
      exit 1
    fi
  done
done

# 1. jars: fetched with Maven when lib/ is missing, incomplete or older than pom.xml.
ensure_jars kafka-up || exit 1
VERSION="$(kafka_version)"

# 2. server.properties of each node, rendered on every start (ports and paths may change)
if [ "$NODES" -ge 3 ]; then RF=3; MIN_ISR=2; else RF="$NODES"; MIN_ISR=1; fi
VOTERS=""
for s in $ALL_SLOTS; do VOTERS+="${VOTERS:+,}$([ "$s" = 0 ] && echo 1 || echo "$s")@127.0.0.1:$(slot_ctrl_port "$s")"; done
render_props() {  # $1 slot (node_paths already set)
  mkdir -p "$LOG_DIRS"
  sed -e "s|@NODE_ID@|$([ "$1" = 0 ] && echo 1 || echo "$1")|g" \
      -e "s|@QUORUM_VOTERS@|$VOTERS|g" \
      -e "s|@KAFKA_PORT@|$(slot_port "$1")|g" \
      -e "s|@KAFKA_CONTROLLER_PORT@|$(slot_ctrl_port "$1")|g" \
      -e "s|@LOG_DIRS@|$LOG_DIRS|g" \
      -e "s|@RF@|$RF|g" -e "s|@MIN_ISR@|$MIN_ISR|g" \
      "$KAFKA_LOCAL_DIR/server.properties.template" > "$PROPS.tmp"
  mv "$PROPS.tmp" "$PROPS"
}

storage_tool() {  # kafka.tools.StorageTool with the broker's logging, into the node's dir
  "$JAVA" -cp "$LIB_DIR/*" -Dlog4j2.configurationFile="$KAFKA_LOCAL_DIR/log4j2.properties" \
      -Dkafka.logs.dir="$NODE_DIR" kafka.tools.StorageTool "$@"
}

# 3. format each KRaft log dir once (static controller.quorum.voters: -t and -c are enough,
#    no --standalone / --initial-controllers). The nodes of a cluster share one cluster id:
#    that of a node formatted before, else a new one.
cluster_id=""
if [ "$NODES" != 1 ]; then
  for s in $ALL_SLOTS; do
    node_paths "$s"
    if [ -s "$LOG_DIRS/meta.properties" ]; then
      cluster_id="$(sed -n 's/^cluster\.id=//p' "$LOG_DIRS/meta.properties")"
      [ -n "$cluster_id" ] && break
    fi
  done
fi
for s in $TO_START; do
  node_paths "$s"
  render_props "$s"
  [ -s "$LOG_DIRS/meta.properties" ] && continue
  t="$(now)"
  [ -n "$cluster_id" ] || cluster_id="$(storage_tool random-uuid)"
  echo "$cluster_id" > "$NODE_DIR/cluster.id"
  if ! storage_tool format --ignore-formatted -t "$cluster_id" -c "$PROPS" > "$NODE_DIR/format.log" 2>&1; then
    echo "kafka-up: formatting $LOG_DIRS failed:" >&2; cat "$NODE_DIR/format.log" >&2; exit 1
  fi
  echo "kafka-up: formatted $LOG_DIRS (cluster id $cluster_id) in $(elapsed "$t")s"
done

# 4. start in the background, detached from this shell's session
t="$(now)"
if [ "$NODES" = 1 ]; then
  echo "$KAFKA_PORT $KAFKA_CONTROLLER_PORT" > "$PORT_FILE"
else
  echo "$KAFKA_PORT $KAFKA_CONTROLLER_PORT $NODES" > "$PORT_FILE"
fi
STARTED=""
for s in $TO_START; do
  node_paths "$s"
  JVM_OPTS=(
    $HEAP_OPTS
    -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
    -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
    -Dlog4j2.configurationFile="$KAFKA_LOCAL_DIR/log4j2.properties"
    -Dkafka.logs.dir="$NODE_DIR"
  )
  {
    echo "===== $(date -Is) starting Kafka $VERSION: $PROPS"
  } >> "$OUT_FILE"
  (
    exec 9>&-   # don't hand the lock to the broker
    cd "$NODE_DIR"
    exec setsid nohup "$JAVA" "${JVM_OPTS[@]}" -cp "$LIB_DIR/*" kafka.Kafka "$PROPS" \
      >> "$OUT_FILE" 2>&1 < /dev/null
  ) &
  pid=$!
  echo "$pid" > "$PID_FILE"; PIDS[$s]="$pid"; STARTED+="${STARTED:+ }$s"
done

# 5. wait for every node (a cluster's nodes elect a controller together, so all are launched first)
for s in $SLOTS; do
  pid="${PIDS[$s]}"
  if ! info="$(wait_ready "$s" "$pid")"; then
    for k in $STARTED; do
      if kill -0 "${PIDS[$k]}" 2>/dev/null; then
        echo "kafka-up: stopping the unresponsive $(slot_name "$k") (pid ${PIDS[$k]})" >&2
        kill -TERM "${PIDS[$k]}" 2>/dev/null || true
      fi
    done
    exit 1
  fi
  if [ "$NODES" = 1 ]; then
    echo "kafka-up: Kafka $VERSION up (pid $pid, $info)"
  else
    echo "kafka-up: Kafka $VERSION $(slot_name "$s") up (pid $pid, $info)"
  fi
done
if [ "$NODES" = 1 ]; then
  echo "kafka-up: broker answered $(elapsed "$t")s after launch; kafka-up took $(elapsed "$T0")s in all"
  echo "kafka-up: log $LOG_FILE, data $LOG_DIRS"
else
  echo "kafka-up: node$([ "${SLOTS// /}" != "$SLOTS" ] && echo s) ${SLOTS% } of $NODES answered $(elapsed "$t")s after launch; kafka-up took $(elapsed "$T0")s in all"
  echo "kafka-up: logs and data in $DATA_DIR/node-{1..$NODES}/"
fi
echo "bootstrap: $BOOTSTRAP"
