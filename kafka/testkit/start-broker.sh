#!/usr/bin/env bash
# Start a single-node Apache Kafka (KRaft, combined broker+controller) bound to
# 127.0.0.1, in the foreground, for riffle's tests.
#
# Usage: kafka/testkit/start-broker.sh DIR [PORT] [-- KAFKA_ARGS...]
#   DIR   state dir (created): server.properties, data/, logs/server.log,
#         broker.env (BOOTSTRAP=..., CONTROLLER_PORT=..., KAFKA_LIBS=...), broker.pid
#   PORT  client (PLAINTEXT) port; omitted or 0 = pick a free one. The controller
#         port is always picked free. Both are written to DIR/broker.env.
#   KAFKA_ARGS are passed to kafka.Kafka, e.g. -- --override group.streams.num.standby.replicas=1
#
# Env: KAFKA_LIBS                jar dir (default: fetched by fetch-kafka.sh)
#      RIFFLE_KAFKA_NODE_ID, RIFFLE_KAFKA_CONTROLLER_PORT, RIFFLE_KAFKA_VOTERS,
#      RIFFLE_KAFKA_CLUSTER_ID   one node of a cluster: its node id (default 1), its
#                                controller port (default: a free one), the quorum's voters
#                                (default: this node alone) and the cluster id to format with
#                                (default: a random one). Every node is broker and controller.
#      RIFFLE_KAFKA_SECURE=1     also listen with SASL_PLAINTEXT and SASL_SSL on two more
#                                free ports (SASL_PLAINTEXT_PORT, SASL_SSL_PORT in broker.env):
#                                SASL mechanisms PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, user
#                                alice / alice-secret for each; TLS with DIR/tls/server.pem
#                                (PEM: the broker's certificate chain and unencrypted PKCS#8
#                                key, for 127.0.0.1), and SASL_SSL clients must show a
#                                certificate signed by DIR/tls/ca.pem. The Rust test kit
#                                (KafkaBrokerBuilder::secure) makes those files.
#      RIFFLE_KAFKA_HEAP_OPTS    default "-Xmx512m -Xms128m"
#      RIFFLE_KAFKA_JVM_OPTS     default "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
#
# Storage is formatted on first use (kafka.tools.StorageTool format); a DIR
# that is already formatted is reused as it is (same cluster id, same data).
# Run it in the background and wait with wait-broker.sh; stop it with
# stop-broker.sh DIR (SIGTERM = clean shutdown). The java process has the pid
# of this script (it execs), written to DIR/broker.pid.
#
# Streams groups (KIP-1071): nothing to enable in Kafka 4.4. The
# "streams" rebalance protocol is in group.coordinator.rebalance.protocols by
# default (classic,consumer,streams) and formatting at the latest production
# metadata version turns on the feature streams.version=1. The settings below
# only make a one-node test cluster quick (no initial rebalance delay).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage="usage: $0 DIR [PORT] [-- KAFKA_ARGS...]"
[[ $# -ge 1 && "$1" != -* ]] || die "${usage}"
DIR="$1"; shift
PORT=0
if [[ $# -ge 1 && "$1" != "--" ]]; then PORT="$1"; shift; fi
if [[ $# -ge 1 && "$1" == "--" ]]; then shift; fi
[[ "${PORT}" =~ ^[0-9]+$ ]] || die "PORT must be a number, got '${PORT}' (${usage})"

require_java
kafka_libs

mkdir -p "${DIR}"
DIR="$(cd "${DIR}" && pwd)"
mkdir -p "${DIR}/data" "${DIR}/logs"

if [[ -f "${DIR}/broker.pid" ]] && kill -0 "$(cat "${DIR}/broker.pid")" 2>/dev/null \
   && grep -q kafka.Kafka "/proc/$(cat "${DIR}/broker.pid")/cmdline" 2>/dev/null; then
  die "a broker is already running from ${DIR} (pid $(cat "${DIR}/broker.pid")): stop it with stop-broker.sh ${DIR}"
fi

if [[ "${PORT}" == 0 ]]; then PORT="$(free_port)"
elif port_in_use "${PORT}"; then die "port ${PORT} on 127.0.0.1 is already in use"
fi
CPORT="${RIFFLE_KAFKA_CONTROLLER_PORT:-$(free_port)}"
while [[ "${CPORT}" == "${PORT}" ]]; do CPORT="$(free_port)"; done
NODE_ID="${RIFFLE_KAFKA_NODE_ID:-1}"
VOTERS="${RIFFLE_KAFKA_VOTERS:-${NODE_ID}@127.0.0.1:${CPORT}}"
LISTENERS="PLAINTEXT://127.0.0.1:${PORT}"
PROTOCOLS="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
SECURE_PROPS=""
SECURE_ENV=""
SCRAM_ARGS=()
if [[ "${RIFFLE_KAFKA_SECURE:-0}" == 1 ]]; then
  [[ -f "${DIR}/tls/server.pem" && -f "${DIR}/tls/ca.pem" ]] \
    || die "RIFFLE_KAFKA_SECURE=1 needs ${DIR}/tls/server.pem and ${DIR}/tls/ca.pem"
  SPORT="$(free_port)"; SSLPORT="$(free_port)"
  while [[ "${SPORT}" == "${PORT}" || "${SPORT}" == "${CPORT}" ]]; do SPORT="$(free_port)"; done
  while [[ "${SSLPORT}" == "${PORT}" || "${SSLPORT}" == "${CPORT}" || "${SSLPORT}" == "${SPORT}" ]]; do SSLPORT="$(free_port)"; done
  LISTENERS="${LISTENERS},SASL_PLAINTEXT://127.0.0.1:${SPORT},SASL_SSL://127.0.0.1:${SSLPORT}"
  PROTOCOLS="${PROTOCOLS},SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
  plain='org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
  scram='org.apache.kafka.common.security.scram.ScramLoginModule required;'
  SECURE_PROPS="sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
  for l in sasl_plaintext sasl_ssl; do
    SECURE_PROPS+=$'\n'"listener.name.${l}.plain.sasl.jaas.config=${plain}"
    SECURE_PROPS+=$'\n'"listener.name.${l}.scram-sha-256.sasl.jaas.config=${scram}"
    SECURE_PROPS+=$'\n'"listener.name.${l}.scram-sha-512.sasl.jaas.config=${scram}"
  done
  SECURE_PROPS+=$'\n'"ssl.keystore.type=PEM"
  SECURE_PROPS+=$'\n'"ssl.keystore.location=${DIR}/tls/server.pem"
  SECURE_PROPS+=$'\n'"ssl.truststore.type=PEM"
  SECURE_PROPS+=$'\n'"ssl.truststore.location=${DIR}/tls/ca.pem"
  SECURE_PROPS+=$'\n'"listener.name.sasl_ssl.ssl.client.auth=required"
  SECURE_ENV=$'\n'"SASL_PLAINTEXT_PORT=${SPORT}"$'\n'"SASL_SSL_PORT=${SSLPORT}"
  SCRAM_ARGS=(--add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]'
              --add-scram 'SCRAM-SHA-512=[name=alice,password=alice-secret]')
fi

cat > "${DIR}/server.properties" <<PROPS
# Written by riffle kafka/testkit/start-broker.sh; rewritten on every start.
process.roles=broker,controller
node.id=${NODE_ID}
controller.quorum.voters=${VOTERS}
listeners=${LISTENERS},CONTROLLER://127.0.0.1:${CPORT}
advertised.listeners=${LISTENERS}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=${PROTOCOLS}
${SECURE_PROPS}
log.dirs=${DIR}/data
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
num.network.threads=2
num.io.threads=2
background.threads=2
group.coordinator.threads=1
share.coordinator.threads=1
num.recovery.threads.per.data.dir=1
log.cleaner.threads=1
# Groups: start rebalancing at once (tests have one node and few members).
group.initial.rebalance.delay.ms=0
group.streams.initial.rebalance.delay.ms=0
# Streams groups need no setting in 4.4: group.coordinator.rebalance.protocols
# defaults to classic,consumer,streams (and setting it only logs a deprecation
# warning), and the feature streams.version=1 is on after formatting.
PROPS

cat > "${DIR}/log4j2.properties" <<PROPS
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${DIR}/logs/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d] %p %m (%c)%n
appender.stderr.filter.threshold.type = ThresholdFilter
appender.stderr.filter.threshold.level = WARN
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
rootLogger.appenderRef.stderr.ref = STDERR
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
PROPS

if [[ ! -f "${DIR}/data/meta.properties" ]]; then
  # A random 16-byte id in Kafka's Uuid text form (base64url, no padding).
  cluster_id="${RIFFLE_KAFKA_CLUSTER_ID:-$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')}"
  log "formatting ${DIR}/data (cluster id ${cluster_id})"
  java "${TOOL_JVM_OPTS[@]}" -Dlog4j2.configurationFile="${TESTKIT_DIR}/log4j2-tools.properties" \
    -cp "${KAFKA_LIBS}/*" kafka.tools.StorageTool format \
    --cluster-id="${cluster_id}" --config "${DIR}/server.properties" "${SCRAM_ARGS[@]}" \
    >"${DIR}/logs/format.log" 2>&1 \
    || { cat "${DIR}/logs/format.log" >&2; die "kafka.tools.StorageTool format failed (see above)"; }
fi

cat > "${DIR}/broker.env" <<ENV
BOOTSTRAP=127.0.0.1:${PORT}
PORT=${PORT}
CONTROLLER_PORT=${CPORT}
KAFKA_LIBS=${KAFKA_LIBS}
KAFKA_VERSION=${KAFKA_VERSION}${SECURE_ENV}
ENV
# A restart on the same DIR: wait-broker.sh must see this start's "Kafka Server started".
if [[ -f "${DIR}/logs/server.log" ]]; then
  mv -f "${DIR}/logs/server.log" "${DIR}/logs/server.log.previous"
fi
echo $$ > "${DIR}/broker.pid"
log "starting Kafka ${KAFKA_VERSION} on 127.0.0.1:${PORT} (controller 127.0.0.1:${CPORT}), log ${DIR}/logs/server.log"

read -r -a heap <<<"${RIFFLE_KAFKA_HEAP_OPTS:--Xmx512m -Xms128m}"
read -r -a jvm <<<"${RIFFLE_KAFKA_JVM_OPTS:--XX:+UseSerialGC -XX:TieredStopAtLevel=1}"
exec java "${heap[@]}" "${jvm[@]}" -Djava.awt.headless=true \
  -Dlog4j2.configurationFile="${DIR}/log4j2.properties" \
  -cp "${KAFKA_LIBS}/*" kafka.Kafka "${DIR}/server.properties" "$@"
