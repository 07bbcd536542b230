"""Kafka topics declared in config, checked or created at start, never auto-created by
the broker (real broker of scripts/services.sh)."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grebe.brokers.kafka import KafkaProducer, KafkaSource, create_topic, delete_topic
from grebe.brokers.kafka_topics import inspect_topics, topic_spec
from grebe.cli import app
from grebe.config import KafkaConfig
from grebe.errors import ConfigError

pytestmark = pytest.mark.integration


def _config(bootstrap: str, **values: object) -> KafkaConfig:
    return KafkaConfig(bootstrap_servers=bootstrap, session_timeout_ms=6000,
                       **values)  # type: ignore[arg-type]


async def _shape(config: KafkaConfig, name: str) -> tuple[int | None, int | None]:
    (state,) = await inspect_topics(config, [topic_spec(config, name, "output")])
    return state.partitions, state.replication_factor


async def test_a_missing_input_topic_is_an_error_naming_it_and_is_not_created(
    kafka_bootstrap: str,
) -> None:
    config = _config(kafka_bootstrap)
    typo = f"psots-{uuid.uuid4().hex[:8]}"
    source = KafkaSource("posts", config, topic=typo, dead_letter_topic=f"d-{typo}")
    with pytest.raises(ConfigError, match=typo) as raised:
        await source.start()
    assert "create_missing_topics" in str(raised.value) and "grebe topics create" in str(
        raised.value)
    assert await _shape(config, typo) == (None, None)


async def test_create_missing_topics_creates_inputs_and_dead_letters_as_declared(
    kafka_bootstrap: str,
) -> None:
    run = uuid.uuid4().hex[:8]
    topic, dead = f"in-{run}", f"dead-{run}"
    config = _config(kafka_bootstrap, create_missing_topics=True, partitions=2,
                     topics={topic: {"partitions": 5}})
    source = KafkaSource("posts", config, topic=topic, dead_letter_topic=dead)
    await source.start()
    try:
        assert await _shape(config, topic) == (5, 1)
        assert await _shape(config, dead) == (1, 1)  # one partition keeps arrival order
    finally:
        await source.stop()
        await delete_topic(kafka_bootstrap, topic)
        await delete_topic(kafka_bootstrap, dead)


async def test_output_topic_is_created_as_declared_before_the_first_publish(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture,
) -> None:
    out = f"out-{uuid.uuid4().hex[:8]}"
    config = _config(kafka_bootstrap, partitions=3)
    producer = KafkaProducer(config, topics=[out])
    caplog.set_level(logging.WARNING)
    await producer.start()
    try:
        await producer.publish(out, b"k", b"v")
        assert await _shape(config, out) == (3, 1)  # not the broker's auto-create default 1
        # No "Topic ... not found in cluster metadata" error on the first publish.
        assert not [r for r in caplog.records if "not found in cluster metadata" in r.message]
    finally:
        await producer.stop()
        await delete_topic(kafka_bootstrap, out)


def _write_config(tmp_path: Path, bootstrap: str, topic: str, **kafka: object) -> Path:
    path = tmp_path / "grebe.yaml"
    path.write_text(json.dumps({
        "data_dir": str(tmp_path / "var"),
        "streams": [{"name": "posts", "broker": "kafka", "topic": topic,
                     "eligibilities": ["basic"]}],
        "dispatcher": {"dead_letter_topic": f"{topic}-dead"},
        "output": {"broker": "kafka", "topic": f"{topic}-out"},
        "engine": {"processes": 0}, "metrics": {"enabled": False},
        "kafka": {"bootstrap_servers": bootstrap, **kafka},
    }))
    return path


def test_grebe_run_on_a_mistyped_input_topic_fails_naming_it(
    tmp_path: Path, kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    typo = f"psots-{uuid.uuid4().hex[:8]}"
    config = _write_config(tmp_path, kafka_bootstrap, typo)
    result = CliRunner(env={"COLUMNS": "400"}).invoke(
        app, ["run", "-c", str(config), "--exit-when-done"]
    )
    assert result.exit_code == 1, result.output  # before: exit 0, having read nothing
    logged = caplog.text + result.output
    assert f"Kafka input topic(s) '{typo}' do not exist" in logged
    assert "Unclosed" not in logged


def test_grebe_topics_check_create_and_differences(tmp_path: Path,
                                                   kafka_bootstrap: str) -> None:
    import asyncio

    topic = f"tp-{uuid.uuid4().hex[:8]}"
    runner = CliRunner(env={"COLUMNS": "250"})  # rich tables: one line a row
    config = _write_config(tmp_path, kafka_bootstrap, topic, topics={topic: {"partitions": 2}})
    try:
        result = runner.invoke(app, ["topics", "check", "-c", str(config)])
        assert result.exit_code == 1, result.output
        assert result.output.count("missing") == 3  # input, dead letters, output

        result = runner.invoke(app, ["topics", "create", "-c", str(config)])
        assert result.exit_code == 0, result.output
        assert "created 3 Kafka topic(s)" in result.output
        result = runner.invoke(app, ["topics", "check", "-c", str(config)])
        assert result.exit_code == 0, result.output

        wider = _write_config(tmp_path, kafka_bootstrap, topic,
                              topics={topic: {"partitions": 6}})
        result = runner.invoke(app, ["topics", "check", "-c", str(wider)])
        assert result.exit_code == 1
        assert "partitions 2, config wants 6" in result.output
        result = runner.invoke(app, ["topics", "list", "-c", str(wider)])
        assert result.exit_code == 0
    finally:
        for name in (topic, f"{topic}-dead", f"{topic}-out"):
            asyncio.run(delete_topic(kafka_bootstrap, name))


async def test_replication_factor_is_reported(kafka_bootstrap: str) -> None:
    name = f"rf-{uuid.uuid4().hex[:8]}"
    await create_topic(kafka_bootstrap, name, 1)
    config = _config(kafka_bootstrap, topics={name: {"replication_factor": 3}})
    try:
        (state,) = await inspect_topics(config, [topic_spec(config, name, "input")])
        assert state.differences() == ["partitions 1, config wants 3",
                                       "replication factor 1, config wants 3"]
    finally:
        await delete_topic(kafka_bootstrap, name)


def test_ingest_into_a_kafka_stream_writes_its_topic_and_refuses_a_missing_one(
    tmp_path: Path, kafka_bootstrap: str
) -> None:
    """Before, `grebe ingest` wrote a Kafka stream's posts into the local log."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    topic = f"ing-{uuid.uuid4().hex[:8]}"
    posts = tmp_path / "posts.jsonl"
    posts.write_text("".join(
        json.dumps({"id": f"p{i}", "author_id": "a", "text": f"post {i}"}) + "\n"
        for i in range(3)))
    config = _write_config(tmp_path, kafka_bootstrap, topic)
    result = CliRunner().invoke(app, ["ingest", str(posts), "-c", str(config)])
    assert result.exit_code == 1  # one line naming the missing topic, no traceback
    assert "nothing appended" in result.output and topic in result.output
    assert asyncio.run(_shape(_config(kafka_bootstrap), topic)) == (None, None)

    asyncio.run(create_topic(kafka_bootstrap, topic, 1))
    try:
        result = CliRunner().invoke(app, ["ingest", str(posts), "-c", str(config)])
        assert result.exit_code == 0, result.output

        async def count() -> int:
            consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap)
            await consumer.start()
            try:
                tp = TopicPartition(topic, 0)
                consumer.assign([tp])
                return (await consumer.end_offsets([tp]))[tp]
            finally:
                await consumer.stop()

        assert asyncio.run(count()) == 3
    finally:
        asyncio.run(delete_topic(kafka_bootstrap, topic))
