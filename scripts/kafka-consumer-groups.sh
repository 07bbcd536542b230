#!/usr/bin/env bash
# kafka-consumer-groups.sh of the Kafka distribution, e.g.
#   scripts/kafka-consumer-groups.sh --bootstrap-server 127.0.0.1:9092 --describe --group grebe
exec "$(dirname "$0")/kafka-run-class.sh" \
  org.apache.kafka.tools.consumer.group.ConsumerGroupCommand "$@"
