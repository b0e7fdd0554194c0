#!/usr/bin/env bash
# End-to-end check of the Kafka test kit: fetch the jars, start a one-node
# KRaft broker in a temp dir, create a topic with TopicCommand, check that the
# streams.version feature is on, join a streams group with the hand-encoded
# probe (python3), see it with kafka-streams-groups' main class, stop the broker.
# Prints timings and the broker's memory; the last line is "smoke: N passed, M failed".
#
# Usage: kafka/testkit/smoke-test.sh [KEEP_DIR]   (default: a mktemp dir, removed at the end)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

require_java
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
passed=0; failed=0
check() {  # check NAME COMMAND...
  local name="$1"; shift
  if "$@"; then passed=$((passed + 1)); echo "ok   ${name}"
  else failed=$((failed + 1)); echo "FAIL ${name}"; fi
}

t=$(now)
KAFKA_LIBS="$("${TESTKIT_DIR}/fetch-kafka.sh" "${KAFKA_VERSION}" | tail -n1)"; export KAFKA_LIBS
echo "fetch: $(secs "$t" "$(now)")s (${KAFKA_LIBS})"

DIR="${1:-$(mktemp -d /tmp/riffle-kafka.XXXXXX)}"
keep="${1:+yes}"
cleanup() {
  "${TESTKIT_DIR}/stop-broker.sh" "${DIR}" >/dev/null 2>&1 || true
  [[ -n "${keep}" ]] || rm -rf "${DIR}"
}
trap cleanup EXIT

t=$(now)
mkdir -p "${DIR}/logs"
"${TESTKIT_DIR}/start-broker.sh" "${DIR}" >"${DIR}/logs/console.log" 2>&1 &
BOOTSTRAP="$("${TESTKIT_DIR}/wait-broker.sh" "${DIR}" 120)"
echo "broker: ready at ${BOOTSTRAP} in $(secs "$t" "$(now)")s (format + start; log ${DIR}/logs/server.log)"

run() { "${TESTKIT_DIR}/kafka-run.sh" "$@"; }
has_topic() {
  run org.apache.kafka.tools.TopicCommand --bootstrap-server "${BOOTSTRAP}" --create \
    --topic smoke-in --partitions 3 --replication-factor 1 >/dev/null &&
  run org.apache.kafka.tools.TopicCommand --bootstrap-server "${BOOTSTRAP}" --list | grep -qx smoke-in
}
check "TopicCommand --create/--list" has_topic

streams_feature() {
  run org.apache.kafka.tools.FeatureCommand --bootstrap-server "${BOOTSTRAP}" describe \
    | grep -E '^Feature: streams.version\s' | grep -q 'FinalizedVersionLevel: 1'
}
check "FeatureCommand: streams.version=1" streams_feature

SG=org.apache.kafka.tools.streams.StreamsGroupCommand
if command -v python3 >/dev/null 2>&1; then
  probe() {
    python3 "${TESTKIT_DIR}/streams_group_probe.py" --bootstrap "${BOOTSTRAP}" --group smoke-app \
      --source-topic smoke-in --commit 0 >"${DIR}/probe.log" 2>&1 \
      && grep -q '^offset commit epoch=[0-9]* -> {0: 0, 1: 0, 2: 0}' "${DIR}/probe.log"
  }
  check "StreamsGroupHeartbeat join + OffsetCommit v9 (streams_group_probe.py)" probe
  listed() { run "${SG}" --bootstrap-server "${BOOTSTRAP}" --list | tee "${DIR}/list.out" | grep -qx smoke-app; }
  check "${SG} --list" listed
  described() {
    run "${SG}" --bootstrap-server "${BOOTSTRAP}" --describe --group smoke-app --members \
      | tee "${DIR}/describe.out" | grep -q 'ACTIVE: 0:\[0,1,2\]'
  }
  check "${SG} --describe --members" described
  sed 's/^/  | /' "${DIR}/list.out" "${DIR}/describe.out"
else
  listed() { run "${SG}" --bootstrap-server "${BOOTSTRAP}" --list >/dev/null; }
  check "${SG} --list (no python3: no group joined)" listed
fi

pid="$(cat "${DIR}/broker.pid")"
echo "broker memory: RSS $(( $(awk '/VmRSS/ {print $2}' "/proc/${pid}/status") / 1024 )) MiB, heap max 512m"
t=$(now)
"${TESTKIT_DIR}/stop-broker.sh" "${DIR}"
echo "stop: $(secs "$t" "$(now)")s"
echo "smoke: ${passed} passed, ${failed} failed"
[[ "${failed}" == 0 ]]
