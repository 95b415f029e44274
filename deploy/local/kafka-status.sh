#!/usr/bin/env bash
# Exit 0 and print "up ..." when the local broker runs and answers a Metadata request on
# 127.0.0.1:$KAFKA_PORT; otherwise exit 1 and print "down ...".
#   env: KAFKA_PORT (the running broker's, else 9092), KAFKA_DATA_DIR (<repo>/var/kafka)
set -euo pipefail
# shellcheck source=_common.sh
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
recorded_ports
BOOTSTRAP="127.0.0.1:$KAFKA_PORT"

if pid="$(find_pid)"; then
  if info="$(probe_metadata "$KAFKA_PORT")"; then
    echo "up pid=$pid port=$KAFKA_PORT bootstrap=$BOOTSTRAP kafka=$(kafka_version) ($info)"
    exit 0
  fi
  echo "down: pid $pid is running but does not answer on $BOOTSTRAP (starting, or stuck: see $LOG_FILE)"
  exit 1
fi
if info="$(probe_metadata "$KAFKA_PORT")"; then
  echo "down: no broker from $DATA_DIR runs, but another Kafka answers on $BOOTSTRAP ($info)"
  exit 1
fi
echo "down bootstrap=$BOOTSTRAP"
exit 1
