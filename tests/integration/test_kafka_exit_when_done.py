"""`grebe run --exit-when-done` on a real Kafka topic: a batch job over what the topic
held at start, ending with exit code 0 once the group committed all of it."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from grebe.brokers.kafka import KafkaProducer, create_topic, delete_topic
from grebe.config import KafkaConfig

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GREBE = str(Path(sys.executable).with_name("grebe"))
PARTITIONS = 3


@pytest.fixture
async def names(kafka_bootstrap: str, postgres_dsn: str) -> AsyncIterator[dict[str, str]]:
    tag = uuid.uuid4().hex[:8]
    n = {"topic": f"ewd-in-{tag}", "output": f"ewd-out-{tag}", "group": f"ewd-{tag}",
         "table": f"ewd_{tag}"}
    await create_topic(kafka_bootstrap, n["topic"], PARTITIONS)
    await create_topic(kafka_bootstrap, n["output"], PARTITIONS)
    yield n
    for topic in (n["topic"], n["output"]):
        await delete_topic(kafka_bootstrap, topic)
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await conn.execute(f"DROP TABLE IF EXISTS {n['table']}")
    finally:
        await conn.close()


def _config(tmp: Path, bootstrap: str, dsn: str, n: dict[str, str]) -> Path:
    path = tmp / "grebe.yaml"
    path.write_text(json.dumps({
        "data_dir": str(tmp / "var"),
        "streams": [{"name": "posts", "broker": "kafka", "topic": n["topic"],
                     "group": n["group"], "eligibilities": ["basic"]}],
        "kafka": {"bootstrap_servers": bootstrap, "session_timeout_ms": 6000},
        "store": {"backend": "postgres", "postgres_dsn": dsn, "postgres_table": n["table"]},
        "output": {"broker": "kafka", "topic": n["output"]},
        "engine": {"processes": 0, "drain_window_s": 5},
        "metrics": {"enabled": False},
    }))
    return path


def _run(config: Path, log: Path) -> int:
    with log.open("ab") as handle:
        return subprocess.run([GREBE, "run", "-c", str(config), "--exit-when-done"],
                              stdout=handle, stderr=handle, timeout=120).returncode


async def test_exit_when_done_processes_the_topic_and_exits_0(
    kafka_bootstrap: str, postgres_dsn: str, names: dict[str, str], tmp_path: Path
) -> None:
    posts = 600
    producer = KafkaProducer(KafkaConfig(bootstrap_servers=kafka_bootstrap), linger_ms=20)
    await producer.start()
    try:
        await producer.publish_many(names["topic"], [
            (f"p{i}".encode(), json.dumps({"id": f"p{i}", "author_id": f"a{i % 7}",
                                           "text": f"Post number {i}"}).encode())
            for i in range(posts)
        ])
    finally:
        await producer.stop()
    config = _config(tmp_path, kafka_bootstrap, postgres_dsn, names)
    log = tmp_path / "run.log"

    code = _run(config, log)
    assert code == 0, log.read_text(errors="replace")[-4000:]
    assert "stopping: done" in log.read_text(errors="replace")  # caught up, not a crash
    conn = await asyncpg.connect(postgres_dsn)
    try:
        ids = [r[0] for r in await conn.fetch(f"SELECT DISTINCT post_id FROM {names['table']}")]
    finally:
        await conn.close()
    assert sorted(ids) == sorted(f"p{i}" for i in range(posts))
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        committed = await admin.list_consumer_group_offsets(names["group"])
    finally:
        await admin.close()
    assert sum(meta.offset for tp, meta in committed.items()
               if tp.topic == names["topic"]) == posts

    # Run again: the group has finished the topic, so it exits at once, still 0.
    assert _run(config, log) == 0, log.read_text(errors="replace")[-4000:]
