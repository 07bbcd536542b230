"""Thunder ingest on the real Kafka broker through a failing stretch of polls: health
goes NOT_SERVING, posts produced meanwhile are read once polls succeed, then it is
ready again (issue 13). The failures are injected in front of the real KafkaSource,
since the shared broker must not be stopped."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from grebe.brokers.kafka import KafkaProducer, KafkaSource, create_topic, delete_topic
from grebe.config import KafkaConfig
from grebe.core.source import Message
from grebe.errors import BrokerError
from grebe.thunder.events import PostCreate, encode_event
from grebe.thunder.ingest import ThunderIngest
from grebe.thunder.metrics import ThunderMetrics
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import ThunderStore

pytestmark = pytest.mark.integration


class Faulty:
    """The real source, with polls failing while `failing` is set."""

    def __init__(self, source: KafkaSource) -> None:
        self.source = source
        self.failing = False
        self.failed = 0

    async def start(self) -> None:
        await self.source.start()

    async def stop(self) -> None:
        await self.source.stop()

    async def poll(self, max_messages: int, timeout: float) -> list[Message]:  # noqa: ASYNC109
        if self.failing:
            self.failed += 1
            await asyncio.sleep(0.01)
            raise BrokerError("thunder: Kafka fetch failed: injected")
        return await self.source.poll(max_messages, timeout)

    async def ack(self, *args: object, **kwargs: object) -> None:
        await self.source.ack(*args, **kwargs)  # type: ignore[arg-type]

    async def lag(self) -> int:
        return await self.source.lag()


async def until(predicate, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


async def publish(bootstrap: str, topic: str, ids: range) -> None:
    producer = KafkaProducer(KafkaConfig(bootstrap_servers=bootstrap))
    await producer.start()
    try:
        await producer.publish_many(topic, [
            (f"p{i}".encode(), encode_event(PostCreate(post_id=f"p{i}", author_id=f"a{i % 3}",
                                                        created_at=time.time())))
            for i in ids])
    finally:
        await producer.stop()


async def test_kafka_poll_errors_then_recovery(kafka_bootstrap: str) -> None:
    topic = f"thunder-{uuid.uuid4().hex[:10]}"
    await create_topic(kafka_bootstrap, topic, 2)
    settings = ThunderSettings(poll_batch=8, poll_timeout_s=0.2, retry_backoff_s=0.02,
                               retry_backoff_max_s=0.1)
    source = Faulty(KafkaSource("thunder", KafkaConfig(
        bootstrap_servers=kafka_bootstrap, session_timeout_ms=6000, commit_interval_s=0.02),
        topic=topic, group=f"g-{uuid.uuid4().hex[:8]}"))
    store = ThunderStore(settings)
    metrics = ThunderMetrics()
    ingest = ThunderIngest(source, store, settings, metrics)  # type: ignore[arg-type]
    try:
        await publish(kafka_bootstrap, topic, range(20))
        await ingest.start()
        await until(lambda: len(store) == 20 and ingest.ready.is_set())
        source.failing = True
        await until(lambda: source.failed >= 3)
        assert not ingest.ready.is_set()
        assert metrics.registry.get_sample_value("grebe_thunder_ingest_ready") == 0
        assert metrics.registry.get_sample_value("grebe_thunder_ingest_stalled_seconds") > 0
        await publish(kafka_bootstrap, topic, range(20, 50))  # during the outage
        source.failing = False
        await ingest.wait_ready(60)
        # The broker's high-water mark may lag the first polls: wait for all 50.
        await until(lambda: len(store) == 50)
        assert metrics.registry.get_sample_value("grebe_thunder_ingest_stalled_seconds") == 0
    finally:
        await ingest.stop()
        await delete_topic(kafka_bootstrap, topic)
