"""Names and defaults in one place (arq-style): no magic strings elsewhere."""

from __future__ import annotations

from pathlib import Path

DEFAULT_DATA_DIR = Path("var")
DEFAULT_LOG_DB = "log.db"
DEFAULT_STORE_DB = "annotations.db"

# Topics of the embedded and Kafka brokers.
DEFAULT_INPUT_TOPIC = "posts"
DEFAULT_OUTPUT_TOPIC = "annotations"
DEFAULT_DEAD_LETTER_TOPIC = "dead-letters"
DEFAULT_CONSUMER_GROUP = "grebe"

# Dispatcher defaults.
DEFAULT_MAX_IN_FLIGHT = 2048
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BACKOFF_BASE_S = 0.2
DEFAULT_BACKOFF_MAX_S = 30.0
DEFAULT_POLL_BATCH = 512

# Engine defaults.
DEFAULT_ENGINE_PROCESSES = 1
DEFAULT_ENGINE_CONCURRENCY = 1024
DEFAULT_TASK_TIMEOUT_S = 30.0
DEFAULT_DRAIN_WINDOW_S = 20.0

DEFAULT_METRICS_PORT = 9464
DEFAULT_API_PORT = 8080
DEFAULT_THUNDER_PORT = 50051

# Environment variable prefix for config overrides: GREBE_DISPATCHER__MAX_IN_FLIGHT=...
ENV_PREFIX = "GREBE_"
CONFIG_ENV_VAR = "GREBE_CONFIG"
