#!/usr/bin/env bash
# Run any Java main class from the Kafka jars with a small heap, e.g.
#
#   kafka/testkit/kafka-run.sh org.apache.kafka.tools.TopicCommand \
#       --bootstrap-server 127.0.0.1:9092 --create --topic t --partitions 3
#   kafka/testkit/kafka-run.sh org.apache.kafka.tools.streams.StreamsGroupCommand \
#       --bootstrap-server 127.0.0.1:9092 --list
#
# Main classes behind Kafka 4.4's bin/*.sh scripts that matter to riffle:
#   kafka-topics.sh          org.apache.kafka.tools.TopicCommand
#   kafka-streams-groups.sh  org.apache.kafka.tools.streams.StreamsGroupCommand
#   kafka-consumer-groups.sh org.apache.kafka.tools.consumer.group.ConsumerGroupCommand
#   kafka-features.sh        org.apache.kafka.tools.FeatureCommand
#   kafka-storage.sh         kafka.tools.StorageTool
#   kafka-console-producer.sh org.apache.kafka.tools.ConsoleProducer
#   kafka-console-consumer.sh org.apache.kafka.tools.consumer.ConsoleConsumer
#   kafka-get-offsets.sh     org.apache.kafka.tools.GetOffsetShell
#   kafka-broker-api-versions.sh org.apache.kafka.tools.BrokerApiVersionsCommand
# Env: KAFKA_LIBS (jar dir; default: fetched by fetch-kafka.sh),
#      RIFFLE_KAFKA_TOOL_JVM_OPTS (JVM flags, default small heap / C1 only).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[[ $# -ge 1 ]] || die "usage: $0 MAIN_CLASS [ARGS...]"
require_java
kafka_libs
main="$1"; shift
# Tools log only WARN and above to stderr.
cfg="${TESTKIT_DIR}/log4j2-tools.properties"
exec java "${TOOL_JVM_OPTS[@]}" -Dlog4j2.configurationFile="${cfg}" \
  -cp "${KAFKA_LIBS}/*" "${main}" "$@"
