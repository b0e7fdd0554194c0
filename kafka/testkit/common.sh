# Shared helpers for the kafka/testkit scripts (sourced, not executed).
# shellcheck shell=bash

TESTKIT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KAFKA_VERSION="${RIFFLE_KAFKA_VERSION:-4.4.0}"

die() { echo "$(basename "$0"): error: $*" >&2; exit 1; }
log() { echo "$(basename "$0"): $*" >&2; }

require_java() {
  command -v java >/dev/null 2>&1 || die "java not found: install openjdk-17-jre-headless (apt-get install -y openjdk-17-jre-headless)"
}

# Sets KAFKA_LIBS to the jar dir, fetching the jars on first use.
kafka_libs() {
  if [[ -z "${KAFKA_LIBS:-}" ]]; then
    local cached="${RIFFLE_KAFKA_CACHE:-${HOME}/.cache/riffle}/kafka-${KAFKA_VERSION}/libs"
    if [[ -f "${cached}/.complete" && -f "${cached}/kafka-streams-${KAFKA_VERSION}.jar" ]]; then
      KAFKA_LIBS="${cached}"
    else
      KAFKA_LIBS="$("${TESTKIT_DIR}/fetch-kafka.sh" "${KAFKA_VERSION}" | tail -n1)"
    fi
  fi
  [[ -f "${KAFKA_LIBS}/kafka_2.13-${KAFKA_VERSION}.jar" ]] \
    || die "no kafka_2.13-${KAFKA_VERSION}.jar in KAFKA_LIBS=${KAFKA_LIBS}"
  export KAFKA_LIBS
}

# JVM flags for short-lived command-line tools: tiny heap, C1 only, serial GC
# (the machines have 2 cores that are shared with cargo builds).
TOOL_JVM_OPTS=(${RIFFLE_KAFKA_TOOL_JVM_OPTS:--Xmx192m -Xss1m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto})

# True when something accepts TCP connections on 127.0.0.1:$1.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Prints a currently free TCP port on 127.0.0.1 (racy, like every such helper).
free_port() {
  local p i
  for i in $(seq 1 200); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
    if ! port_in_use "${p}"; then echo "${p}"; return 0; fi
  done
  die "could not find a free TCP port on 127.0.0.1"
}
