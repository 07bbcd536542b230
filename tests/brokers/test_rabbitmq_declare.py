"""RabbitMQ declaration: clear errors for a queue declared with other arguments, no
silent drops on publish, `grebe ingest` and `grebe topics` on RabbitMQ streams (real
broker of scripts/services.sh)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aio_pika
import pytest
from typer.testing import CliRunner

from grebe.brokers.rabbitmq import RabbitPublisher, RabbitSource
from grebe.cli import app
from grebe.config import RabbitMQConfig
from grebe.errors import BrokerError, ConfigError
from grebe.types import Envelope, Post

pytestmark = pytest.mark.integration


@pytest.fixture
async def queue(rabbit_url: str) -> AsyncIterator[str]:
    name = f"decl-{uuid.uuid4().hex[:10]}"
    yield name
    await _delete(rabbit_url, name, f"{name}.dead")


async def _delete(url: str, *queues: str) -> None:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        for name in queues:
            await channel.queue_delete(name)


async def _declare(url: str, name: str, arguments: dict[str, Any] | None = None) -> None:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue(name, durable=True, arguments=arguments)


async def test_a_queue_without_x_max_priority_is_an_error_naming_the_fix(
    rabbit_url: str, queue: str
) -> None:
    await _declare(rabbit_url, queue)  # by hand, as a new user might
    source = RabbitSource("rq", RabbitMQConfig(url=rabbit_url), queue=queue,
                          dead_letter_queue=f"{queue}.dead")
    with pytest.raises(ConfigError) as raised:
        await source.start()
    message = str(raised.value)
    assert queue in message and "x-max-priority=none" in message
    assert f"rabbitmqctl delete_queue {queue}" in message


async def test_a_queue_with_another_priority_suggests_matching_it(
    rabbit_url: str, queue: str
) -> None:
    await _declare(rabbit_url, queue, {"x-max-priority": 5})
    publisher = RabbitPublisher(RabbitMQConfig(url=rabbit_url), queue)
    with pytest.raises(ConfigError, match=r"set rabbitmq\.max_priority: 5 to match"):
        await publisher.start()


async def test_publishing_to_a_deleted_queue_fails_instead_of_dropping(
    rabbit_url: str, queue: str
) -> None:
    publisher = RabbitPublisher(RabbitMQConfig(url=rabbit_url), queue)
    await publisher.start()
    try:
        await _delete(rabbit_url, queue)  # e.g. an operator "cleaning up"
        with pytest.raises(BrokerError, match="unroutable"):
            await publisher.publish(Envelope(post=Post(id="p1", author_id="a", text="hi")))
    finally:
        await publisher.stop()


def _config_file(tmp_path: Path, url: str, queue: str, **rabbitmq: object) -> Path:
    path = tmp_path / "grebe.yaml"
    path.write_text(json.dumps({
        "data_dir": str(tmp_path / "var"),
        "streams": [{"name": "rq", "broker": "rabbitmq", "topic": queue}],
        "dispatcher": {"dead_letter_topic": f"{queue}.dead"},
        "rabbitmq": {"url": url, **rabbitmq},
    }))
    return path


async def _drain(url: str, queue: str) -> list[aio_pika.abc.AbstractIncomingMessage]:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        q = await channel.declare_queue(queue, passive=True)
        got = []
        while (message := await q.get(fail=False)) is not None:
            got.append(message)
            await message.ack()
        return got


def test_ingest_into_a_rabbitmq_stream_declares_its_queue(
    tmp_path: Path, rabbit_url: str, queue: str
) -> None:
    """Before, `grebe ingest` wrote a RabbitMQ stream's posts into the local log."""
    posts = tmp_path / "posts.jsonl"
    posts.write_text("\n".join(json.dumps({
        "post": {"id": f"p{i}", "author_id": "a", "text": f"post {i}"},
        "user": {"id": "a", "tier": tier},
    }) for i, tier in enumerate(["free", "paid", "creator"])) + "\n")
    config = _config_file(tmp_path, rabbit_url, queue)
    result = CliRunner().invoke(app, ["ingest", str(posts), "-c", str(config)])
    assert result.exit_code == 0, result.output
    assert "ingested 3 posts" in result.output
    got = asyncio.run(_drain(rabbit_url, queue))
    # Highest tier first: the queue was declared with x-max-priority like the source's.
    assert [(m.message_id, m.priority) for m in got] == [("p1", 3), ("p2", 2), ("p0", 0)]


def test_grebe_topics_on_rabbitmq_names_missing_and_mismatched_queues(
    tmp_path: Path, rabbit_url: str, queue: str
) -> None:
    runner = CliRunner(env={"COLUMNS": "400"})
    config = _config_file(tmp_path, rabbit_url, queue)
    result = runner.invoke(app, ["topics", "check", "-c", str(config)])
    assert result.exit_code == 1 and result.output.count("missing") == 2, result.output

    result = runner.invoke(app, ["topics", "create", "-c", str(config)])
    assert result.exit_code == 0, result.output
    assert runner.invoke(app, ["topics", "check", "-c", str(config)]).exit_code == 0

    other = _config_file(tmp_path, rabbit_url, queue, max_priority=7)
    result = runner.invoke(app, ["topics", "check", "-c", str(other)])
    assert result.exit_code == 1
    assert "x-max-priority=3, but grebe declares x-max-priority=7" in result.output
    result = runner.invoke(app, ["topics", "create", "-c", str(other)])
    assert result.exit_code == 1 and "set rabbitmq.max_priority: 3 to match" in result.output


async def test_the_api_intake_on_rabbitmq_declares_at_start_and_publishes_by_tier(
    rabbit_url: str, queue: str, tmp_path: Path
) -> None:
    from grebe.api.intake import build_intake, parse_posts
    from grebe.config import load_config

    config = load_config(data_dir=tmp_path, rabbitmq={"url": rabbit_url},
                         streams=[{"name": "rq", "broker": "rabbitmq", "topic": queue}])
    intake = build_intake(config)  # through the rabbitmq backend's producer
    await intake.start()
    try:
        body = json.dumps([
            {"post": {"id": "low", "author_id": "a", "text": "x"}},
            {"post": {"id": "high", "author_id": "b", "text": "y"},
             "user": {"id": "b", "tier": "paid"}},
        ]).encode()
        assert await intake.append(parse_posts(body, max_batch=10)) == [None, None]
    finally:
        await intake.stop()
    connection = await aio_pika.connect(rabbit_url)
    async with connection:
        channel = await connection.channel()
        q = await channel.declare_queue(queue, passive=True)
        first = await q.get(no_ack=True)
        assert first is not None and first.message_id == "high" and first.priority


async def test_the_api_intake_on_a_mismatched_queue_fails_at_start(
    rabbit_url: str, queue: str, tmp_path: Path
) -> None:
    from grebe.api.intake import build_intake
    from grebe.config import load_config

    await _declare(rabbit_url, queue, {"x-max-priority": 5})
    config = load_config(data_dir=tmp_path, rabbitmq={"url": rabbit_url},
                         streams=[{"name": "rq", "broker": "rabbitmq", "topic": queue}])
    with pytest.raises(ConfigError, match=r"set rabbitmq\.max_priority: 5 to match"):
        await build_intake(config).start()
