"""`broker: memory`: the whole pipeline in one process with no log file or server, and
every broker-facing command (ingest, the API intake, dlq) through the backend."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from grebe.api.intake import build_intake, parse_posts
from grebe.brokers.factory import build_ingest_producer
from grebe.brokers.memory_backend import memory_topic
from grebe.commands.dlq import list_dead_letters, replay
from grebe.commands.ingest import ingest
from grebe.config import GrebeConfig, load_config
from grebe.stores.sqlite import SqliteStore
from pipeline_run import run_until_caught_up


def _config(tmp_path: Path) -> GrebeConfig:
    return load_config(
        data_dir=tmp_path,
        streams=[{"name": "posts", "broker": "memory", "topic": f"m-{uuid.uuid4().hex}",
                  "eligibilities": ["basic"]}],
        output={"broker": "memory", "topic": f"out-{uuid.uuid4().hex}"},
        brokers={"memory": {"partitions": 2}},
        engine={"processes": 0}, metrics={"enabled": False},
    )


def _post(i: int) -> bytes:
    return json.dumps({"id": f"m{i}", "author_id": "a", "text": f"memory {i}"}).encode()


async def test_a_memory_stream_runs_end_to_end_and_its_dead_letters_replay(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    topic = config.streams[0].topic
    producer = build_ingest_producer(config, topic)
    await producer.start()
    lines = [(i + 1, _post(i)) for i in range(4)] + [(5, b'{"id": 1}')]
    report = await ingest(lines, producer, topic, validate=False)
    await producer.stop()
    assert report.accepted == 5 and memory_topic(topic).partitions == 2

    intake = build_intake(config)  # POST /v1/posts goes through the same backend
    await intake.start()
    assert await intake.append(parse_posts(_post(9), max_batch=10)) == [None]
    await intake.stop()

    await run_until_caught_up(config)
    store = SqliteStore(config.sqlite_path)
    await store.start()
    assert await store.count() == 5
    await store.stop()
    assert memory_topic(config.output.topic).lag() == 5  # the output sink published there

    (entry,) = await list_dead_letters(config)
    assert entry.broker == "memory" and entry.record is not None
    assert entry.record.source == "posts" and entry.record.original == b'{"id": 1}'
    assert (await replay(config)).replayed == 1
    assert memory_topic(topic).lag() == 1  # back on its stream's topic, once
    assert (await replay(config)).replayed == 0
    assert [e.replayed for e in await list_dead_letters(config)] == [True]
