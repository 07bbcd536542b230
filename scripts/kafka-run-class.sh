#!/usr/bin/env bash
# Run one Kafka tool class with the jars scripts/services.sh caches (the broker's libs
# plus the kafka-tools jar), like bin/kafka-run-class.sh of the Kafka distribution,
# whose scripts Maven Central does not carry. Fetches the tools on first use.
# Usage: scripts/kafka-run-class.sh CLASS [ARGS...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# The same paths as scripts/services.sh (GREBE_CACHE_DIR, GREBE_KAFKA_VERSION).
version=${GREBE_KAFKA_VERSION:-3.9.1}
cache=${GREBE_CACHE_DIR:-$HOME/.cache/grebe}/kafka-$version
if [ ! -f "$cache/tools/.complete-$version" ] || [ ! -f "$cache/libs/.complete-$version" ]; then
  "$here/services.sh" tools >&2
fi
exec java -Xmx512m -Djava.awt.headless=true \
  -Dlog4j.configuration="file:$cache/tools/tools-log4j.properties" \
  -cp "$cache/libs/*:$cache/tools/*" "$@"
