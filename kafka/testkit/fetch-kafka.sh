#!/usr/bin/env bash
# Fetch Apache Kafka broker + tools jars (and their runtime dependencies) from
# Maven Central with mvn, into a cache dir usable as a java classpath:
#
#   ~/.cache/riffle/kafka-<version>/libs/*.jar
#
# Usage: kafka/testkit/fetch-kafka.sh [VERSION]        (default 4.4.0)
# Env:   RIFFLE_KAFKA_VERSION  version (overridden by $1)
#        RIFFLE_KAFKA_CACHE    cache root (default ~/.cache/riffle)
#        RIFFLE_LOG4J_VERSION  log4j2 version for the slf4j binding (default 2.25.3)
#        RIFFLE_KAFKA_MAVEN_OPTS extra mvn arguments, e.g. -Dmaven.repo.local=/tmp/m2
#
# Idempotent: when the libs dir is complete (a .complete marker written last),
# a second run prints the dir and exits at once. The last line on stdout is
# always the libs dir, so callers can do:  LIBS=$(fetch-kafka.sh | tail -n1)
set -euo pipefail

VERSION="${1:-${RIFFLE_KAFKA_VERSION:-4.4.0}}"
LOG4J_VERSION="${RIFFLE_LOG4J_VERSION:-2.25.3}"
CACHE_ROOT="${RIFFLE_KAFKA_CACHE:-${HOME}/.cache/riffle}"
DEST="${CACHE_ROOT}/kafka-${VERSION}"
LIBS="${DEST}/libs"
MARKER="${LIBS}/.complete"
# A cache fetched before kafka-streams joined the list lacks only its jar: fetched again, the new
# jars are added beside the old ones (a broker or tool running from the directory keeps its
# files).
STREAMS_JAR="${LIBS}/kafka-streams-${VERSION}.jar"

die() { echo "fetch-kafka.sh: error: $*" >&2; exit 1; }
log() { echo "fetch-kafka.sh: $*" >&2; }

if [[ -f "${MARKER}" && -f "${STREAMS_JAR}" ]]; then
  log "cached: ${LIBS} ($(ls "${LIBS}"/*.jar | wc -l) jars)"
  echo "${LIBS}"
  exit 0
fi

command -v java >/dev/null 2>&1 || die "java not found: install openjdk-17-jre-headless (apt-get install -y openjdk-17-jre-headless)"
command -v mvn  >/dev/null 2>&1 || die "mvn not found: install maven (apt-get install -y maven)"
java_major=$(java -version 2>&1 | awk -F'"' '/version/ {print $2}' | cut -d. -f1)
[[ "${java_major}" =~ ^[0-9]+$ && "${java_major}" -ge 17 ]] \
  || die "Kafka ${VERSION} needs Java 17+, found java version '${java_major}': install openjdk-17-jre-headless"

mkdir -p "${DEST}"
WORK=$(mktemp -d "${DEST}/.fetch.XXXXXX")
trap 'rm -rf "${WORK}"; rmdir "${DEST}" 2>/dev/null || true' EXIT

# A throwaway pom whose runtime dependency closure is "broker + admin tools".
# - kafka_2.13: the broker (kafka.Kafka), StorageTool, and all server modules.
# - kafka-tools: TopicCommand, StreamsGroupCommand (kafka-streams-groups.sh), ...
#   Its connect-runtime dependency (Jetty, Jersey, ...) is only used by the
#   Connect-related tools, so it is excluded to keep the download small.
# - kafka-streams: its windowed deserializers (TimeWindowedDeserializer, ...) for the console
#   consumer's key.deserializer; rocksdbjni (~60 MB, only for its state stores) is excluded.
# - log4j-slf4j-impl + log4j-core: Kafka logs through slf4j 1.7; without a
#   binding it logs nothing at all.
cat > "${WORK}/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.riffle.testkit</groupId>
  <artifactId>kafka-libs</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>${VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>${VERSION}</version>
      <exclusions>
        <exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId></exclusion>
      </exclusions>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka-streams</artifactId><version>${VERSION}</version>
      <exclusions>
        <exclusion><groupId>org.rocksdb</groupId><artifactId>rocksdbjni</artifactId></exclusion>
      </exclusions>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>${LOG4J_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>${LOG4J_VERSION}</version>
    </dependency>
  </dependencies>
</project>
POM

log "resolving org.apache.kafka:kafka_2.13:${VERSION} + kafka-tools + kafka-streams with mvn (Maven Central) ..."
start=$(date +%s)
read -r -a mvn_extra <<<"${RIFFLE_KAFKA_MAVEN_OPTS:-}"
if ! mvn -B -q "${mvn_extra[@]}" -f "${WORK}/pom.xml" \
      org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="${WORK}/libs" >"${WORK}/mvn.log" 2>&1; then
  tail -n 40 "${WORK}/mvn.log" >&2
  die "mvn could not resolve Kafka ${VERSION} (is Maven Central reachable, and is ${VERSION} published? see output above)"
fi
n=$(ls "${WORK}/libs"/*.jar 2>/dev/null | wc -l)
[[ -f "${WORK}/libs/kafka_2.13-${VERSION}.jar" && -f "${WORK}/libs/kafka-tools-${VERSION}.jar" \
   && -f "${WORK}/libs/kafka-streams-${VERSION}.jar" ]] \
  || die "mvn finished but kafka_2.13 / kafka-tools / kafka-streams ${VERSION} jars are missing in ${WORK}/libs"

if [[ -f "${MARKER}" ]]; then
  # An older complete cache: add the new jars (the same versions of the old ones are there),
  # without removing a file a running broker may still read.
  for jar in "${WORK}/libs"/*.jar; do
    name=$(basename "${jar}")
    if [[ ! -f "${LIBS}/${name}" ]]; then
      # Renamed into place: a java classpath `libs/*` never sees a half-copied jar.
      cp "${jar}" "${LIBS}/.${name}.part"
      mv "${LIBS}/.${name}.part" "${LIBS}/${name}"
    fi
  done
else
  # Publish atomically: a half-finished run never looks complete.
  rm -rf "${LIBS}"
  mv "${WORK}/libs" "${LIBS}"
fi
echo "${VERSION}" > "${MARKER}"
log "fetched ${n} jars ($(du -sh "${LIBS}" | cut -f1)) in $(( $(date +%s) - start ))s"
echo "${LIBS}"
