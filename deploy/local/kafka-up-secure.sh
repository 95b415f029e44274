#!/usr/bin/env bash
# Start the secured local Apache Kafka: a second single-node KRaft broker, separate from the
# PLAINTEXT one of kafka-up.sh (own data dir, own ports, same jars), with
#   - a SASL_SSL client listener on 127.0.0.1:$KAFKA_SECURE_PORT (9192): TLS with a certificate
#     of a local CA (SAN IP:127.0.0.1, DNS:localhost), SASL SCRAM-SHA-512;
#   - mutual-TLS inter-broker (9194) and controller (9193) listeners, on 127.0.0.1 only;
#   - the StandardAuthorizer, super users admin (and the broker itself),
#     allow.everyone.if.no.acl.found=false: a principal may do only what an ACL allows;
#   - SCRAM users admin, worker, connector, operator (forget: transcript.control) and reader, created when the log dir is formatted
#     (kafka-storage format --add-scram), with random passwords made at the first start.
# Writes one env file per principal, $KAFKA_SECURE_DATA_DIR/<user>.env (mode 0600): KAFKA_BOOTSTRAP,
# KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD,
# KAFKA_SSL_CAFILE. Waits until the broker authenticates admin and answers a Metadata request
# over TLS (secure_probe.py). Idempotent: a no-op when it is already up.
#   env: KAFKA_SECURE_DATA_DIR (<repo>/var/kafka/secure), KAFKA_SECURE_PORT (9192),
#        KAFKA_SECURE_CONTROLLER_PORT (9193), KAFKA_SECURE_INTERNAL_PORT (9194),
#        KAFKA_SECURE_HEAP_OPTS ("-Xmx512m -Xms128m"), KAFKA_START_TIMEOUT (90 s),
#        JAVA, MVN, PYTHON (python3: the probe needs only its standard library)
set -euo pipefail
_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# _common.sh derives every path from KAFKA_DATA_DIR; the PLAINTEXT broker's variables are not ours
KAFKA_DATA_DIR="${KAFKA_SECURE_DATA_DIR:-$(cd "$_here/../.." && pwd)/var/kafka/secure}"
unset KAFKA_PORT KAFKA_CONTROLLER_PORT KAFKA_NODES
# shellcheck source=_common.sh
. "$_here/_common.sh"
T0="$(now)"
ME=kafka-up-secure

PORT="${KAFKA_SECURE_PORT:-9192}"
CTRL_PORT="${KAFKA_SECURE_CONTROLLER_PORT:-9193}"
INTERNAL_PORT="${KAFKA_SECURE_INTERNAL_PORT:-9194}"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
HEAP_OPTS="${KAFKA_SECURE_HEAP_OPTS:--Xmx512m -Xms128m}"
JAVA="${JAVA:-java}"
PYTHON="${PYTHON:-python3}"
TLS_DIR="$DATA_DIR/tls"
CA_FILE="$TLS_DIR/ca.pem"
BOOTSTRAP="127.0.0.1:$PORT"
USERS=(admin worker connector operator reader)
BROKER_CN="transcript-owner-broker"

# the env files and server.properties hold paths unquoted
if ! [[ "$DATA_DIR" =~ ^[A-Za-z0-9/._+-]+$ ]]; then
  echo "$ME: the data dir path may hold only A-Z a-z 0-9 / . _ + - (got '$DATA_DIR');" \
       "set KAFKA_SECURE_DATA_DIR" >&2
  exit 2
fi
for p in "$PORT" "$CTRL_PORT" "$INTERNAL_PORT"; do
  if ! [[ "$p" =~ ^[0-9]+$ ]] || [ "$p" -lt 1 ] || [ "$p" -gt 65535 ]; then
    echo "$ME: port '$p' is out of range" >&2; exit 2
  fi
done
if [ "$PORT" = "$CTRL_PORT" ] || [ "$PORT" = "$INTERNAL_PORT" ] || [ "$CTRL_PORT" = "$INTERNAL_PORT" ]; then
  echo "$ME: the three ports must differ ($PORT, $CTRL_PORT, $INTERNAL_PORT)" >&2; exit 2
fi

umask 077
mkdir -p "$DATA_DIR"
chmod 700 "$DATA_DIR"
exec 9>"$LOCK_FILE"
flock -w 120 9 || { echo "$ME: another kafka-up-secure/kafka-down-secure holds $LOCK_FILE" >&2; exit 1; }

env_file() { echo "$DATA_DIR/$1.env"; }
probe() {  # $1 timeout (s): exit status of secure_probe.py as admin; its output on stdout/stderr
  "$PYTHON" "$KAFKA_LOCAL_DIR/secure_probe.py" "$(env_file admin)" --timeout "$1"
}
stop_started() {  # $1 pid: a broker this run started and gives up on
  if kill -0 "$1" 2>/dev/null; then
    echo "$ME: stopping the broker (pid $1)" >&2
    kill -TERM "$1" 2>/dev/null || true
  fi
}

# Until the broker authenticates admin and answers, the process dies, or the timeout.
# $1 pid, $2 1 when this run started it. Prints the probe's line.
wait_ready() {
  local pid="$1" deadline left rc out
  deadline=$(( $(date +%s) + START_TIMEOUT ))
  while :; do
    left=$(( deadline - $(date +%s) ))
    [ "$left" -ge 1 ] || left=1
    rc=0; out="$(probe "$(( left < 10 ? left : 10 ))" 2>&1)" || rc=$?
    case "$rc" in
      0) echo "$out"; return 0 ;;
      2|3|4) echo "$ME: the broker (pid $pid): ${out#secure_probe: }" >&2
           [ "$rc" = 4 ] || echo "$ME: $(env_file admin) does not hold admin's password of" \
             "this cluster; kafka-down-secure.sh --wipe starts a new one" >&2
           return 1 ;;
    esac
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "$ME: the broker (pid $pid) exited during start-up" >&2; log_tail 60; return 1
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "$ME: the broker (pid $pid) did not answer on $BOOTSTRAP within ${START_TIMEOUT}s" \
           "(${out#secure_probe: })" >&2
      log_tail 60; return 1
    fi
    sleep 0.25  # refused: not listening yet (a connection that got through waits inside the probe)
  done
}

print_env_files() {
  local u
  for u in "${USERS[@]}"; do echo "$ME:   $(env_file "$u")"; done
}

# Already running: the same ports, and then a no-op once it answers.
recorded_ports   # REC_PORT REC_CTRL_PORT from kafka.ports ("<port> <controller> <internal>")
REC_INTERNAL=""
if [ -r "$PORT_FILE" ]; then read -r _ _ REC_INTERNAL < "$PORT_FILE" || true; fi
if pid="$(find_pid)"; then
  echo "$pid" > "$PID_FILE"
  if [ "${REC_PORT:-$PORT}" != "$PORT" ] || [ "${REC_CTRL_PORT:-$CTRL_PORT}" != "$CTRL_PORT" ] ||
     [ "${REC_INTERNAL:-$INTERNAL_PORT}" != "$INTERNAL_PORT" ]; then
    echo "$ME: the broker for $DATA_DIR already runs (pid $pid) on ports" \
         "$REC_PORT/$REC_CTRL_PORT/$REC_INTERNAL, not $PORT/$CTRL_PORT/$INTERNAL_PORT;" \
         "run kafka-down-secure.sh first to change ports" >&2
    exit 1
  fi
  if [ ! -s "$(env_file admin)" ]; then
    echo "$ME: the broker for $DATA_DIR runs (pid $pid), but $(env_file admin) is gone, and with" \
         "it admin's password; kafka-down-secure.sh --wipe, then kafka-up-secure.sh makes a new" \
         "cluster" >&2
    exit 1
  fi
  if info="$(probe 3 2>/dev/null)"; then
    echo "$ME: already up (pid $pid, Kafka $(kafka_version), $info) - nothing to do"
  else
    echo "$ME: process $pid is running but not answering yet; waiting up to ${START_TIMEOUT}s"
    info="$(wait_ready "$pid")" || exit 1
    echo "$ME: up (pid $pid, Kafka $(kafka_version), $info) after waiting $(elapsed "$T0")s"
  fi
  echo "bootstrap: $BOOTSTRAP"
  exit 0
fi

for p in "$PORT" "$CTRL_PORT" "$INTERNAL_PORT"; do
  if port_in_use "$p"; then
    echo "$ME: port 127.0.0.1:$p is already in use by another process:" >&2
    ss -Hltnp "sport = :$p" >&2 || true
    echo "(set KAFKA_SECURE_PORT / KAFKA_SECURE_CONTROLLER_PORT / KAFKA_SECURE_INTERNAL_PORT)" >&2
    exit 1
  fi
done

# 1. the jars, shared with kafka-up.sh
ensure_jars "$ME" || exit 1
VERSION="$(kafka_version)"

# 2. TLS: a local CA and the broker's certificate, made when missing or about to expire. The CA
#    (ca.pem, what clients trust: KAFKA_SSL_CAFILE) outlives a re-issued broker certificate.
valid_for_a_day() { [ -s "$1" ] && openssl x509 -in "$1" -noout -checkend 86400 >/dev/null 2>&1; }
make_tls() {
  local t new_ca=0
  t="$(now)"
  mkdir -p "$TLS_DIR"
  if ! valid_for_a_day "$CA_FILE" || [ ! -s "$TLS_DIR/ca.key" ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days 3650 \
      -keyout "$TLS_DIR/ca.key" -out "$CA_FILE" -subj "/CN=transcript-owner local CA" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -addext "subjectKeyIdentifier=hash" 2>"$TLS_DIR/openssl.log"
    chmod 644 "$CA_FILE"
    new_ca=1
  fi
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 \
    -keyout "$TLS_DIR/broker.key" -out "$TLS_DIR/broker.csr" -subj "/CN=$BROKER_CN" \
    2>>"$TLS_DIR/openssl.log"
  printf '%s\n' "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth,clientAuth" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost" \
    "subjectKeyIdentifier=hash" "authorityKeyIdentifier=keyid" > "$TLS_DIR/broker.ext"
  openssl x509 -req -sha256 -days 825 -in "$TLS_DIR/broker.csr" -CA "$CA_FILE" \
    -CAkey "$TLS_DIR/ca.key" -CAcreateserial -CAserial "$TLS_DIR/ca.srl" \
    -extfile "$TLS_DIR/broker.ext" -out "$TLS_DIR/broker.pem" 2>>"$TLS_DIR/openssl.log"
  openssl rand -hex 24 > "$TLS_DIR/store.password"
  rm -f "$TLS_DIR/broker.p12" "$TLS_DIR/truststore.p12"
  openssl pkcs12 -export -name broker -in "$TLS_DIR/broker.pem" -inkey "$TLS_DIR/broker.key" \
    -certfile "$CA_FILE" -out "$TLS_DIR/broker.p12" \
    -passout "file:$TLS_DIR/store.password" 2>>"$TLS_DIR/openssl.log"
  keytool -importcert -noprompt -alias ca -file "$CA_FILE" -keystore "$TLS_DIR/truststore.p12" \
    -storetype PKCS12 -storepass:file "$TLS_DIR/store.password" >>"$TLS_DIR/openssl.log" 2>&1
  rm -f "$TLS_DIR/broker.csr" "$TLS_DIR/broker.ext"
  echo "$ME: made $([ "$new_ca" = 1 ] && echo "a CA and ")the broker's certificate" \
       "(SAN IP:127.0.0.1, DNS:localhost) in $TLS_DIR in $(elapsed "$t")s"
}
if ! valid_for_a_day "$CA_FILE" || ! valid_for_a_day "$TLS_DIR/broker.pem" ||
   [ ! -s "$TLS_DIR/store.password" ] || [ ! -s "$TLS_DIR/broker.p12" ] ||
   [ ! -s "$TLS_DIR/truststore.p12" ]; then
  if ! make_tls; then
    echo "$ME: making the certificates failed:" >&2; cat "$TLS_DIR/openssl.log" >&2; exit 1
  fi
fi

# 3. server.properties (mode 0600: it holds the store password), rendered on every start
mkdir -p "$LOG_DIRS"
STORE_PASSWORD="$(cat "$TLS_DIR/store.password")"
sed -e "s|@PORT@|$PORT|g" -e "s|@CONTROLLER_PORT@|$CTRL_PORT|g" \
    -e "s|@INTERNAL_PORT@|$INTERNAL_PORT|g" -e "s|@LOG_DIRS@|$LOG_DIRS|g" \
    -e "s|@TLS_DIR@|$TLS_DIR|g" -e "s|@STORE_PASSWORD@|$STORE_PASSWORD|g" \
    "$KAFKA_LOCAL_DIR/server-secure.properties.template" > "$PROPS.tmp"
mv "$PROPS.tmp" "$PROPS"

# 4. the users' passwords: made at the first start (kept from an env file left by an earlier
#    cluster of this data dir), then only in the env files
declare -A PASSWORD=()
env_value() { [ -r "$1" ] || return 0; sed -n "s/^$2=//p" "$1" | tail -n 1; }
formatted=0; [ -s "$LOG_DIRS/meta.properties" ] && formatted=1
for u in "${USERS[@]}"; do
  PASSWORD[$u]="$(env_value "$(env_file "$u")" KAFKA_SASL_PASSWORD)"
  if ! [[ "${PASSWORD[$u]}" =~ ^[0-9a-f]{32,}$ ]]; then
    if [ "$formatted" = 1 ]; then
      echo "$ME: $(env_file "$u") is missing or holds no password, and the cluster in" \
           "$LOG_DIRS knows the password of $u only by its hash;" \
           "kafka-down-secure.sh --wipe, then kafka-up-secure.sh makes a new cluster" >&2
      exit 1
    fi
    PASSWORD[$u]="$(openssl rand -hex 24)"
  fi
done

# 5. the env files, rewritten on every start (the ports may have changed), mode 0600; written
#    before formatting, so that a format that fails keeps the passwords for the next attempt
for u in "${USERS[@]}"; do
  f="$(env_file "$u")"
  {
    echo "# $u on the secured local broker (deploy/local/kafka-up-secure.sh); keep it private"
    echo "KAFKA_BOOTSTRAP=$BOOTSTRAP"
    echo "KAFKA_SECURITY_PROTOCOL=SASL_SSL"
    echo "KAFKA_SASL_MECHANISM=SCRAM-SHA-512"
    echo "KAFKA_SASL_USERNAME=$u"
    echo "KAFKA_SASL_PASSWORD=${PASSWORD[$u]}"
    echo "KAFKA_SSL_CAFILE=$CA_FILE"
  } > "$f.tmp"
  chmod 600 "$f.tmp"
  mv "$f.tmp" "$f"
done

# 6. format the KRaft log dir once, with the SCRAM users. The passwords go to the JVM in an
#    argument file (java @file, mode 0600, deleted after), not on a command line ps can show.
if [ "$formatted" = 0 ]; then
  t="$(now)"
  cluster_id="$("$JAVA" -cp "$LIB_DIR/*" kafka.tools.StorageTool random-uuid)"
  echo "$cluster_id" > "$NODE_DIR/cluster.id"
  ARGS_FILE="$NODE_DIR/format.args"
  trap 'rm -f "$ARGS_FILE"' EXIT
  {
    echo "kafka.tools.StorageTool"
    echo "format"; echo "-t"; echo "$cluster_id"; echo "-c"; echo "$PROPS"
    for u in "${USERS[@]}"; do echo "--add-scram"; echo "SCRAM-SHA-512=[name=$u,password=${PASSWORD[$u]}]"; done
  } > "$ARGS_FILE"
  if ! "$JAVA" -cp "$LIB_DIR/*" -Dlog4j2.configurationFile="$KAFKA_LOCAL_DIR/log4j2.properties" \
        -Dkafka.logs.dir="$NODE_DIR" "@$ARGS_FILE" > "$NODE_DIR/format.log" 2>&1; then
    rm -f "$ARGS_FILE"
    echo "$ME: formatting $LOG_DIRS failed:" >&2; cat "$NODE_DIR/format.log" >&2; exit 1
  fi
  rm -f "$ARGS_FILE"; trap - EXIT
  echo "$ME: formatted $LOG_DIRS (cluster id $cluster_id, SCRAM-SHA-512 users ${USERS[*]})" \
       "in $(elapsed "$t")s"
fi

# 7. start in the background, detached from this shell's session
echo "$PORT $CTRL_PORT $INTERNAL_PORT" > "$PORT_FILE"
t="$(now)"
# shellcheck disable=SC2206  # HEAP_OPTS is a list of JVM options
JVM_OPTS=(
  $HEAP_OPTS
  -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
  -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
  -Dlog4j2.configurationFile="$KAFKA_LOCAL_DIR/log4j2.properties"
  -Dkafka.logs.dir="$NODE_DIR"
)
echo "===== $(date -Is) starting Kafka $VERSION (secured): $PROPS" >> "$OUT_FILE"
(
  exec 9>&-   # don't hand the lock to the broker
  cd "$NODE_DIR"
  exec setsid nohup "$JAVA" "${JVM_OPTS[@]}" -cp "$LIB_DIR/*" kafka.Kafka "$PROPS" \
    >> "$OUT_FILE" 2>&1 < /dev/null
) &
pid=$!
echo "$pid" > "$PID_FILE"

# 8. wait until admin authenticates and the broker answers over TLS
if ! info="$(wait_ready "$pid")"; then
  stop_started "$pid"
  exit 1
fi
echo "$ME: Kafka $VERSION up (pid $pid, $info)"
echo "$ME: SASL_SSL on $BOOTSTRAP (inter-broker 127.0.0.1:$INTERNAL_PORT and controller" \
     "127.0.0.1:$CTRL_PORT: mutual TLS); answered $(elapsed "$t")s after launch," \
     "kafka-up-secure took $(elapsed "$T0")s in all"
echo "$ME: log $LOG_FILE, env files (mode 0600):"
print_env_files
echo "bootstrap: $BOOTSTRAP"
