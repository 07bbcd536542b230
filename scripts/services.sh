#!/usr/bin/env bash
# Placeholder until the real-brokers work lands: starts nothing.
set -euo pipefail
echo "services: none configured yet"
