"""Real servers for `integration` tests: Redis, PostgreSQL, RabbitMQ, Kafka.

scripts/test.sh starts them (`scripts/services.sh up`) before pytest; a plain `pytest`
run starts the ones whose port is closed, once per session, through the same script.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVICES = {"redis": 6379, "postgres": 5432, "rabbitmq": 5672, "kafka": 9092}
KAFKA_BOOTSTRAP = "127.0.0.1:9092"
RABBIT_URL = "amqp://guest:guest@127.0.0.1:5672/"
REDIS_URL = "redis://127.0.0.1:6379/0"
POSTGRES_DSN = "postgresql://grebe:grebe@127.0.0.1:5432/grebe"

_checked: set[str] = set()


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def require_service(name: str) -> None:
    """Start `name` with scripts/services.sh unless it already listens; fail loudly."""
    if name in _checked:
        return
    if not _port_open(SERVICES[name]):
        result = subprocess.run(
            ["bash", str(ROOT / "scripts" / "services.sh"), "up", name],
            capture_output=True, text=True, timeout=600,
        )
        if result.returncode != 0:
            pytest.fail(f"scripts/services.sh up {name} failed:\n{result.stdout}{result.stderr}")
    _checked.add(name)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    require_service("kafka")
    return KAFKA_BOOTSTRAP


@pytest.fixture(scope="session")
def rabbit_url() -> str:
    require_service("rabbitmq")
    return RABBIT_URL


@pytest.fixture(scope="session")
def redis_url() -> str:
    require_service("redis")
    return REDIS_URL


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    require_service("postgres")
    return POSTGRES_DSN
