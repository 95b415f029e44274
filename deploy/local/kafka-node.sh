#!/usr/bin/env bash
# One node of the local multi-node cluster (kafka-up.sh with KAFKA_NODES > 1), for fault tests:
#   kafka-node.sh stop N     SIGTERM (controlled shutdown), SIGKILL after KAFKA_STOP_TIMEOUT (30 s)
#   kafka-node.sh kill N     SIGKILL (a crash: no controlled shutdown, unflushed log recovered on start)
#   kafka-node.sh start N    start it again and wait until it answers a Metadata request
#   kafka-node.sh status N   exit 0 and "up ..." when it answers, else exit 1 and "down ..."
#   kafka-node.sh pid N      print its pid (exit 1 when it is not running)
# The cluster's size and ports come from the data dir's record, as for kafka-down.sh.
#   env: KAFKA_DATA_DIR (<repo>/var/kafka), KAFKA_STOP_TIMEOUT (30), and for start the
#        variables of kafka-up.sh (KAFKA_HEAP_OPTS, KAFKA_START_TIMEOUT, JAVA)
set -euo pipefail
# shellcheck source=_common.sh
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
T0="$(now)"

usage() { echo "usage: $0 stop|kill|start|status|pid N" >&2; exit 2; }
[ $# -eq 2 ] || usage
CMD="$1"; N="$2"
case "$CMD" in stop|kill|start|status|pid) ;; *) usage ;; esac
[[ "$N" =~ ^[1-9]$ ]] || usage
STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"

recorded_ports
if [ ! -r "$PORT_FILE" ] || [ "$REC_NODES" -lt 2 ]; then
  echo "kafka-node: $DATA_DIR holds no multi-node cluster (start one with KAFKA_NODES=3 kafka-up.sh)" >&2
  exit 1
fi
if [ "$N" -gt "$REC_NODES" ]; then
  echo "kafka-node: the cluster in $DATA_DIR has nodes 1..$REC_NODES, not $N" >&2; exit 2
fi
# the recorded port, not the environment's: the node belongs to that cluster
# shellcheck disable=SC2034  # read by node_port
KAFKA_PORT="$REC_PORT"
node_paths "$N"
PORT="$(node_port "$N")"

case "$CMD" in
  pid)
    find_pid
    ;;
  status)
    if pid="$(find_pid)"; then
      if info="$(probe_metadata "$PORT")"; then echo "up node=$N pid=$pid port=$PORT ($info)"; exit 0; fi
      echo "down: node $N (pid $pid) is running but does not answer on 127.0.0.1:$PORT"; exit 1
    fi
    echo "down node=$N port=$PORT"; exit 1
    ;;
  start)
    exec env KAFKA_NODES="$REC_NODES" KAFKA_PORT="$REC_PORT" KAFKA_CONTROLLER_PORT="$REC_CTRL_PORT" \
      _KAFKA_UP_ONLY_NODE="$N" "$KAFKA_LOCAL_DIR/kafka-up.sh"
    ;;
  stop|kill)
    exec 9>"$LOCK_FILE"
    flock -w 120 9 || { echo "kafka-node: another kafka-up/kafka-down holds $LOCK_FILE" >&2; exit 1; }
    if ! pid="$(find_pid)"; then echo "kafka-node: node $N already down"; exit 0; fi
    if [ "$CMD" = kill ]; then
      kill -KILL "$pid" 2>/dev/null || true
      while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
      echo "kafka-node: killed node $N (pid $pid, 127.0.0.1:$PORT) with SIGKILL"
    else
      echo "kafka-node: stopping node $N (pid $pid, 127.0.0.1:$PORT) ..."
      kill -TERM "$pid" 2>/dev/null || true
      deadline=$(( $(date +%s) + STOP_TIMEOUT ))
      while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.2; done
      if kill -0 "$pid" 2>/dev/null; then
        echo "kafka-node: still running after ${STOP_TIMEOUT}s; sending SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
      fi
      echo "kafka-node: stopped node $N in $(elapsed "$T0")s"
    fi
    rm -f "$PID_FILE"
    ;;
esac
