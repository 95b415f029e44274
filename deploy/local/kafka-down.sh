#!/usr/bin/env bash
# Stop the local Kafka broker, or every node of a local cluster (KAFKA_NODES > 1): SIGTERM
# (controlled shutdown), wait up to KAFKA_STOP_TIMEOUT (30 s), then SIGKILL. Idempotent.
# --wipe also deletes their data, logs and state files. Needs no KAFKA_NODES or ports: it
# finds what this data dir runs.
#   env: KAFKA_DATA_DIR (<repo>/var/kafka), KAFKA_STOP_TIMEOUT (30)
set -euo pipefail
# shellcheck source=_common.sh
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
T0="$(now)"

WIPE=0
for arg in "$@"; do
  case "$arg" in
    --wipe) WIPE=1 ;;
    -h|--help) echo "usage: $0 [--wipe]"; exit 0 ;;
    *) echo "usage: $0 [--wipe]" >&2; exit 2 ;;
  esac
done
STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"
LAST_GRACE=5

if [ ! -d "$DATA_DIR" ]; then
  echo "kafka-down: already down (no data dir $DATA_DIR)"
  exit 0
fi
exec 9>"$LOCK_FILE"
flock -w 120 9 || { echo "kafka-down: another kafka-up/kafka-down holds $LOCK_FILE" >&2; exit 1; }
recorded_ports

# every broker this data dir runs: the single one and/or the nodes of a cluster (node-N/)
RUNNING="$(running_slots)"
declare -A PIDS=()
for s in $RUNNING; do node_paths "$s"; PIDS[$s]="$(find_pid)"; done
if [ -n "$RUNNING" ]; then
  for s in $RUNNING; do
    if [ "$s" = 0 ]; then
      echo "kafka-down: stopping Kafka (pid ${PIDS[$s]}, 127.0.0.1:$KAFKA_PORT) ..."
    else
      echo "kafka-down: stopping Kafka node $s (pid ${PIDS[$s]}, 127.0.0.1:$(node_port "$s")) ..."
    fi
    kill -TERM "${PIDS[$s]}" 2>/dev/null || true
  done
  # all at once: a cluster's nodes shut down together. The last one left has no quorum (its
  # controlled shutdown waits for a controller that is gone): it gets LAST_GRACE seconds once
  # the others have exited, then SIGKILL, which costs it only a log recovery on the next start.
  deadline=$(( $(date +%s) + STOP_TIMEOUT )); lone_since=""
  while :; do
    alive=()
    for s in $RUNNING; do kill -0 "${PIDS[$s]}" 2>/dev/null && alive+=("$s"); done
    [ ${#alive[@]} -eq 0 ] && break
    nows="$(date +%s)"
    if [ "$RUNNING" != 0 ] && [ ${#alive[@]} -eq 1 ] && [ "$(wc -w <<< "$RUNNING")" -gt 1 ]; then
      lone_since="${lone_since:-$nows}"
      if [ $((nows - lone_since)) -ge "$LAST_GRACE" ] && [ -z "${lone_killed:-}" ]; then
        lone_killed=1
        echo "kafka-down: node ${alive[0]} is the last one up and has no quorum to shut down with;" \
             "sending SIGKILL after ${LAST_GRACE}s" >&2
        kill -KILL "${PIDS[${alive[0]}]}" 2>/dev/null || true
      fi
    fi
    if [ "$nows" -ge "$deadline" ]; then
      for s in "${alive[@]}"; do
        echo "kafka-down: $(slot_name "$s") still running after ${STOP_TIMEOUT}s; sending SIGKILL" >&2
        kill -KILL "${PIDS[$s]}" 2>/dev/null || true
      done
    fi
    sleep 0.2
  done
  echo "kafka-down: stopped in $(elapsed "$T0")s"
else
  echo "kafka-down: already down"
fi

wipe_node() {  # the files kafka-up.sh creates for one node (node_paths set)
  rm -rf -- "$LOG_DIRS"
  rm -f -- "$PROPS" "$PID_FILE" "$OUT_FILE" "$LOG_FILE" "$LOG_FILE".[0-9]* \
           "$NODE_DIR/cluster.id" "$NODE_DIR/format.log" "$NODE_DIR"/hs_err_pid*.log
}
node_paths 0; rm -f "$PID_FILE"
for d in "$DATA_DIR"/node-[0-9]*; do
  [ -d "$d" ] || continue
  node_paths "${d##*/node-}"; rm -f "$PID_FILE"
  if [ "$WIPE" = 1 ]; then wipe_node; rmdir -- "$NODE_DIR" 2>/dev/null || true; fi
done
node_paths 0

if [ "$WIPE" = 1 ]; then
  # only what kafka-up.sh creates: never a blanket rm of a user-chosen KAFKA_DATA_DIR
  wipe_node
  rm -f -- "$PORT_FILE" "$DATA_DIR/mvn.log"
  rm -f -- "$LOCK_FILE"
  rmdir -- "$DATA_DIR" 2>/dev/null || true
  echo "kafka-down: wiped $DATA_DIR"
fi
echo "bootstrap: $(bootstrap_list "$REC_NODES") (down)"
