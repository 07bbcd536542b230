"""`grebe run --exit-when-done` on a RabbitMQ stream: it used to exit 0 after the first
message ("source rq cannot report when it is caught up" was taken as done). Now it waits
until the queue is drained and every delivery finished. Real RabbitMQ."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import aio_pika
import pytest

from grebe import constants as C
from grebe.app.supervisor import Runtime, serve
from grebe.brokers.rabbitmq import RabbitPublisher, retry_queue_name
from grebe.config import load_config
from grebe.stores.sqlite import SqliteStore
from grebe.types import Envelope, Post, User

pytestmark = pytest.mark.integration

POSTS = 12


@pytest.fixture
async def queue(rabbit_url: str) -> AsyncIterator[str]:
    name = f"q-exit-{uuid.uuid4().hex[:10]}"
    yield name
    connection = await aio_pika.connect(rabbit_url)
    async with connection:
        channel = await connection.channel()
        for q in (name, f"{name}.dead", *(retry_queue_name(name, n) for n in range(1, 6))):
            await channel.queue_delete(q)


def _config(tmp_path, rabbit_url: str, queue: str):
    return load_config(
        data_dir=tmp_path,
        streams=[{"name": "rq", "broker": "rabbitmq", "topic": queue,
                  "eligibilities": ["basic"]}],
        rabbitmq={"url": rabbit_url},
        dispatcher={"dead_letter_topic": f"{queue}.dead"},
        engine={"processes": 0},
        output={"broker": "none"},
        metrics={"enabled": False},
    )


async def test_exit_when_done_waits_for_every_queued_message(tmp_path, rabbit_url, queue):
    publisher = RabbitPublisher(load_config(rabbitmq={"url": rabbit_url}).rabbitmq, queue)
    await publisher.start()
    for i in range(POSTS):
        await publisher.publish(Envelope(post=Post(id=f"p{i}", author_id="a", text=f"post {i}"),
                                         user=User(id="a")))
    await publisher.stop()
    config = _config(tmp_path, rabbit_url, queue)
    assert await serve(config, exit_when_done=True) == C.EXIT_OK
    store = SqliteStore(config.sqlite_path)
    await store.start()
    assert await store.count() == POSTS
    await store.stop()


async def test_a_source_that_cannot_report_is_refused_not_taken_as_done(tmp_path) -> None:
    class Blind:  # a source with neither offsets nor a drained check
        name = "blind"
        handles_retry = False

        async def start(self) -> None: ...

        async def stop(self) -> None: ...

        async def poll(self, max_messages, timeout):  # noqa: ASYNC109
            return []

        async def ack(self, message, outcome, *, reason=None, dead_letter=None) -> None: ...

    config = load_config(data_dir=tmp_path, engine={"processes": 0},
                         metrics={"enabled": False}, output={"broker": "none"})
    runtime = Runtime(config, source_factory=lambda stream, cfg: Blind())
    await runtime.start()
    try:
        assert runtime.cannot_report_caught_up() == ["blind"]
    finally:
        await runtime.stop(0.0)
