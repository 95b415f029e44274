#!/usr/bin/env bash
# Stop the local Kafka broker: SIGTERM (controlled shutdown), wait up to KAFKA_STOP_TIMEOUT
# (30 s), then SIGKILL. Idempotent. --wipe also deletes its data, logs and state files.
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

if [ ! -d "$DATA_DIR" ]; then
  echo "kafka-down: already down (no data dir $DATA_DIR)"
  exit 0
fi
exec 9>"$LOCK_FILE"
flock -w 120 9 || { echo "kafka-down: another kafka-up/kafka-down holds $LOCK_FILE" >&2; exit 1; }
recorded_ports

if pid="$(find_pid)"; then
  echo "kafka-down: stopping Kafka (pid $pid, 127.0.0.1:$KAFKA_PORT) ..."
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$(( $(date +%s) + STOP_TIMEOUT ))
  while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "kafka-down: still running after ${STOP_TIMEOUT}s; sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
  echo "kafka-down: stopped in $(elapsed "$T0")s"
else
  echo "kafka-down: already down"
fi
rm -f "$PID_FILE"

if [ "$WIPE" = 1 ]; then
  # only what kafka-up.sh creates: never a blanket rm of a user-chosen KAFKA_DATA_DIR
  rm -rf -- "$LOG_DIRS"
  rm -f -- "$PROPS" "$PORT_FILE" "$OUT_FILE" "$LOG_FILE" "$LOG_FILE".[0-9]* \
           "$DATA_DIR/cluster.id" "$DATA_DIR/format.log" "$DATA_DIR/mvn.log" "$DATA_DIR"/hs_err_pid*.log
  rm -f -- "$LOCK_FILE"
  rmdir -- "$DATA_DIR" 2>/dev/null || true
  echo "kafka-down: wiped $DATA_DIR"
fi
echo "bootstrap: 127.0.0.1:$KAFKA_PORT (down)"
