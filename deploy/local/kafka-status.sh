#!/usr/bin/env bash
# Exit 0 and print "up ..." when the local broker runs and answers a Metadata request on
# 127.0.0.1:$KAFKA_PORT; otherwise exit 1 and print "down ...". For a cluster (KAFKA_NODES,
# else the size recorded in the data dir), a line per node, and exit 0 only when all answer.
#   env: KAFKA_PORT (the running broker's, else 9092), KAFKA_DATA_DIR (<repo>/var/kafka),
#        KAFKA_NODES (the recorded cluster size)
set -euo pipefail
# shellcheck source=_common.sh
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
recorded_ports
if [ -n "${KAFKA_NODES:-}" ] && ! valid_nodes "$KAFKA_NODES"; then
  echo "kafka-status: KAFKA_NODES must be 1..9, got '$KAFKA_NODES'" >&2; exit 2
fi
NODES="${KAFKA_NODES:-$REC_NODES}"

if [ "$NODES" = 1 ]; then
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
fi

BOOTSTRAP="$(bootstrap_list "$NODES")"
lines=(); n_up=0
for ((i = 1; i <= NODES; i++)); do
  node_paths "$i"; port="$(node_port "$i")"
  if pid="$(find_pid)"; then
    if info="$(probe_metadata "$port")"; then
      lines+=("node $i up pid=$pid port=$port ($info)"); n_up=$((n_up + 1))
    else
      lines+=("node $i down: pid $pid is running but does not answer on 127.0.0.1:$port (see $LOG_FILE)")
    fi
  elif info="$(probe_metadata "$port")"; then
    lines+=("node $i down: not running from $DATA_DIR, but another Kafka answers on 127.0.0.1:$port ($info)")
  else
    lines+=("node $i down port=$port")
  fi
done
if [ "$n_up" -eq "$NODES" ]; then
  echo "up nodes=$NODES bootstrap=$BOOTSTRAP kafka=$(kafka_version)"
else
  echo "down: $n_up of $NODES nodes up, bootstrap=$BOOTSTRAP"
fi
printf '%s\n' "${lines[@]}"
[ "$n_up" -eq "$NODES" ]
