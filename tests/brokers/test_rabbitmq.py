"""RabbitSource and RabbitPublisher against the real broker of scripts/services.sh."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator

import aio_pika
import pytest

from grebe.brokers.rabbitmq import RabbitPublisher, RabbitSource, retry_queue_name, tier_priority
from grebe.codec import decode_dead_letter, decode_envelope
from grebe.config import RabbitMQConfig
from grebe.core.dispatcher import Dispatcher, Stream
from grebe.core.settings import DispatcherSettings, StreamSettings
from grebe.core.source import Message, Outcome, Source
from grebe.types import Envelope, Post, TaskPayload, TaskResult, User


def test_tier_priority_is_resolved_from_the_tier() -> None:
    assert [tier_priority(t) for t in ("viral", "paid", "creator", "hobby", "free", "trial")] \
        == [3, 3, 2, 1, 0, 0]
    assert tier_priority(None) == tier_priority("unknown") == 0


@pytest.fixture
async def queue(rabbit_url: str) -> AsyncIterator[str]:
    name = f"q-{uuid.uuid4().hex[:10]}"
    yield name
    connection = await aio_pika.connect(rabbit_url)
    async with connection:
        channel = await connection.channel()
        for suffix in ("", ".dead", *(f"{retry_queue_name('', n)}" for n in range(1, 6))):
            await channel.queue_delete(name + suffix)


def _config(url: str, prefetch: int = 1) -> RabbitMQConfig:
    return RabbitMQConfig(url=url, prefetch=prefetch)


async def _poll_n(source: RabbitSource, n: int, within_s: float = 10.0) -> list[Message]:
    got: list[Message] = []
    async with asyncio.timeout(within_s):
        while len(got) < n:
            got += await source.poll(n - len(got), 0.5)
    return got


async def _dead_letters(url: str, queue: str) -> list[bytes]:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        q = await channel.declare_queue(queue, durable=True)
        bodies = []
        while (message := await q.get(fail=False)) is not None:
            bodies.append(message.body)
            await message.ack()
        return bodies


def _envelope(i: int, tier: str) -> Envelope:
    return Envelope(post=Post(id=f"p{i}", author_id="a", text=f"post {i}"),
                    user=User(id="a", tier=tier))  # type: ignore[arg-type]


@pytest.mark.integration
async def test_higher_tiers_are_consumed_first_with_prefetch_1(
    rabbit_url: str, queue: str
) -> None:
    publisher = RabbitPublisher(_config(rabbit_url), queue)
    await publisher.start()
    tiers = ["free", "hobby", "viral", "trial", "creator", "paid", "free", "creator", "hobby"]
    try:
        for i, tier in enumerate(tiers):
            assert await publisher.publish(_envelope(i, tier)) == tier_priority(tier)
    finally:
        await publisher.stop()
    source = RabbitSource("requests", _config(rabbit_url, prefetch=1), queue=queue)
    assert isinstance(source, Source)
    await source.start()
    order = []
    try:
        for _ in tiers:
            [message] = await _poll_n(source, 1)
            order.append(decode_envelope(message.value).user.tier)  # type: ignore[union-attr]
            await source.ack(message, Outcome.DONE)
        assert await source.poll(1, 0.2) == []
    finally:
        await source.stop()
    priorities = [tier_priority(t) for t in order]
    assert priorities == sorted(priorities, reverse=True), order
    assert sorted(order) == sorted(tiers)


class _FailingExecutor:
    """Every payload fails; records when each attempt was submitted."""

    def __init__(self) -> None:
        self.attempts: list[tuple[float, int]] = []

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def submit(self, payload: TaskPayload) -> asyncio.Future[TaskResult]:
        self.attempts.append((time.monotonic(), payload.attempt))
        future: asyncio.Future[TaskResult] = asyncio.get_running_loop().create_future()
        future.set_exception(RuntimeError("model backend down"))
        return future


@pytest.mark.integration
@pytest.mark.slow
async def test_failing_task_is_retried_with_growing_delays_then_dead_lettered(
    rabbit_url: str, queue: str
) -> None:
    publisher = RabbitPublisher(_config(rabbit_url), queue)
    await publisher.start()
    await publisher.publish(_envelope(1, "paid"))
    await publisher.stop()

    dispatch = DispatcherSettings(max_attempts=4, backoff_base_s=0.4, backoff_max_s=10,
                                poll_timeout_s=0.05)
    source = RabbitSource("requests", _config(rabbit_url, prefetch=2), queue=queue,
                          dead_letter_queue=f"{queue}.dead",
                          backoff_base_s=dispatch.backoff_base_s,
                          backoff_max_s=dispatch.backoff_max_s)
    executor = _FailingExecutor()
    dispatcher = Dispatcher([Stream(source, StreamSettings(name="requests"))],
                            executor, dispatch)
    await source.start()
    run = asyncio.create_task(dispatcher.run())
    try:
        async with asyncio.timeout(20):
            while dispatcher.stats.dead < 1:  # noqa: ASYNC110  # stats has no event
                await asyncio.sleep(0.05)
    finally:
        await dispatcher.stop(2.0)
        await run
        await source.stop()
    assert [attempt for _, attempt in executor.attempts] == [1, 2, 3, 4]
    gaps = [b[0] - a[0] for a, b in zip(executor.attempts, executor.attempts[1:], strict=False)]
    # Equal jitter: the wait after attempt n is in [c/2, c], c = 0.4 * 2**(n-1).
    for n, gap in enumerate(gaps, start=1):
        ceiling = 0.4 * 2 ** (n - 1)
        assert ceiling / 2 * 0.95 <= gap <= ceiling + 1.0, (n, gaps)
    assert gaps == sorted(gaps), gaps
    [record] = await _dead_letters(rabbit_url, f"{queue}.dead")
    dead = decode_dead_letter(record)
    assert dead.attempts == 4 and dead.reason == "max_attempts"
    assert "model backend down" in (dead.last_error or "")
    assert decode_envelope(dead.original).post.id == "p1"
    assert dispatcher.stats.retried == 3


_WORKER = """
import asyncio, sys
from grebe.brokers.rabbitmq import RabbitSource
from grebe.config import RabbitMQConfig

async def main():
    source = RabbitSource("w", RabbitMQConfig(url=sys.argv[1], prefetch=1), queue=sys.argv[2])
    await source.start()
    while not (got := await source.poll(1, 1.0)):
        pass
    print(got[0].value.decode(), flush=True)
    await asyncio.Event().wait()  # "processing" until killed, never acked

asyncio.run(main())
"""


@pytest.mark.integration
async def test_a_worker_killed_before_its_ack_gets_the_message_redelivered(
    rabbit_url: str, queue: str
) -> None:
    publisher = RabbitPublisher(_config(rabbit_url), queue)
    await publisher.start()
    await publisher.publish(_envelope(7, "creator"))
    await publisher.stop()
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _WORKER, rabbit_url, queue, stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = await asyncio.wait_for(worker.stdout.readline(), 20)  # type: ignore[union-attr]
        assert decode_envelope(line.strip()).post.id == "p7"
    finally:
        worker.send_signal(signal.SIGKILL)
        await asyncio.wait_for(worker.wait(), 10)
    source = RabbitSource("requests", _config(rabbit_url), queue=queue)
    await source.start()
    try:
        [message] = await _poll_n(source, 1)
        assert decode_envelope(message.value).post.id == "p7"
        assert message.token.redelivered  # type: ignore[union-attr]
        await source.ack(message, Outcome.DONE)
    finally:
        await source.stop()


@pytest.mark.integration
async def test_unfinished_messages_return_to_the_queue_on_stop(
    rabbit_url: str, queue: str
) -> None:
    publisher = RabbitPublisher(_config(rabbit_url), queue)
    await publisher.start()
    for i in range(2):
        await publisher.publish(_envelope(i, "free"))
    await publisher.stop()
    source = RabbitSource("requests", _config(rabbit_url, prefetch=2), queue=queue)
    await source.start()
    first = await _poll_n(source, 2)
    await source.ack(first[0], Outcome.DONE)
    assert await source.lag() == 0  # both delivered to us, none ready
    await source.stop()  # the second was never acked
    again = RabbitSource("requests", _config(rabbit_url), queue=queue)
    await again.start()
    try:
        [message] = await _poll_n(again, 1)
        assert message.value == first[1].value
        await again.ack(message, Outcome.DONE)
        assert await again.poll(1, 0.2) == []
    finally:
        await again.stop()
