#!/usr/bin/env bash
# kafka-topics.sh of the Kafka distribution, e.g.
#   scripts/kafka-topics.sh --bootstrap-server 127.0.0.1:9092 --describe --topic posts
exec "$(dirname "$0")/kafka-run-class.sh" org.apache.kafka.tools.TopicCommand "$@"
