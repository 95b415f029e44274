#!/usr/bin/env bash
# Stop the secured local broker of kafka-up-secure.sh: SIGTERM (controlled shutdown), wait up
# to KAFKA_STOP_TIMEOUT (30 s), then SIGKILL. Idempotent. --wipe also deletes its data, logs,
# certificates and env files (the next kafka-up-secure.sh makes a new cluster, CA and passwords).
#   env: KAFKA_SECURE_DATA_DIR (<repo>/var/kafka/secure), KAFKA_STOP_TIMEOUT (30)
set -euo pipefail
_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KAFKA_DATA_DIR="${KAFKA_SECURE_DATA_DIR:-$(cd "$_here/../.." && pwd)/var/kafka/secure}"
unset KAFKA_PORT KAFKA_CONTROLLER_PORT KAFKA_NODES
# shellcheck source=_common.sh
. "$_here/_common.sh"
T0="$(now)"
ME=kafka-down-secure

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
  echo "$ME: already down (no data dir $DATA_DIR)"
  exit 0
fi
exec 9>"$LOCK_FILE"
flock -w 120 9 || { echo "$ME: another kafka-up-secure/kafka-down-secure holds $LOCK_FILE" >&2; exit 1; }
recorded_ports
BOOTSTRAP="127.0.0.1:${REC_PORT:-9192}"

if pid="$(find_pid)"; then
  echo "$ME: stopping the secured Kafka (pid $pid, $BOOTSTRAP) ..."
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$(( $(date +%s) + STOP_TIMEOUT )); killed=0
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$killed" = 0 ] && [ "$(date +%s)" -ge "$deadline" ]; then
      echo "$ME: still running after ${STOP_TIMEOUT}s; sending SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true; killed=1
    fi
    sleep 0.2
  done
  echo "$ME: stopped in $(elapsed "$T0")s"
else
  echo "$ME: already down"
fi
rm -f -- "$PID_FILE"

if [ "$WIPE" = 1 ]; then
  # only what kafka-up-secure.sh creates: never a blanket rm of a user-chosen data dir
  rm -rf -- "$LOG_DIRS" "$DATA_DIR/tls"
  rm -f -- "$PROPS" "$PROPS.tmp" "$OUT_FILE" "$LOG_FILE" "$LOG_FILE".[0-9]* \
           "$NODE_DIR/cluster.id" "$NODE_DIR/format.log" "$NODE_DIR/format.args" \
           "$NODE_DIR"/hs_err_pid*.log "$PORT_FILE" "$DATA_DIR/mvn.log" \
           "$DATA_DIR"/{admin,worker,connector,operator,reader}.env "$DATA_DIR"/*.env.tmp
  rm -f -- "$LOCK_FILE"
  rmdir -- "$DATA_DIR" 2>/dev/null || true
  echo "$ME: wiped $DATA_DIR"
fi
echo "bootstrap: $BOOTSTRAP (down)"
