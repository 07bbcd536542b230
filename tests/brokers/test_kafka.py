"""KafkaSource and KafkaProducer against the real broker of scripts/services.sh."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from grebe.brokers.kafka import KafkaProducer, KafkaSource, create_topic, delete_topic
from grebe.codec import decode_dead_letter, encode
from grebe.config import KafkaConfig
from grebe.core.source import Message, Outcome, Source
from grebe.errors import BrokerError
from grebe.types import DeadLetter

pytestmark = pytest.mark.integration


def _config(bootstrap: str, **overrides: object) -> KafkaConfig:
    values: dict[str, object] = {
        "bootstrap_servers": bootstrap, "session_timeout_ms": 6000, "revoke_grace_s": 1.0,
        "commit_interval_s": 0.02,
    }
    values.update(overrides)
    return KafkaConfig(**values)  # type: ignore[arg-type]


@pytest.fixture
async def topic(kafka_bootstrap: str):  # type: ignore[no-untyped-def]
    name = f"t-{uuid.uuid4().hex[:10]}"
    await create_topic(kafka_bootstrap, name, 2)
    yield name
    await delete_topic(kafka_bootstrap, name)


async def _produce(bootstrap: str, topic: str, n: int, partition_key: bytes = b"k") -> None:
    producer = KafkaProducer(_config(bootstrap))
    await producer.start()
    try:
        await producer.publish_many(topic, [(partition_key, f"m{i}".encode()) for i in range(n)])
    finally:
        await producer.stop()


async def _poll_n(source: KafkaSource, n: int, within_s: float = 20.0) -> list[Message]:
    got: list[Message] = []
    async with asyncio.timeout(within_s):
        while len(got) < n:
            got += await source.poll(n - len(got), 0.5)
    return got


async def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}


async def _wait_committed(bootstrap: str, group: str, topic: str, want: dict[int, int]) -> None:
    async with asyncio.timeout(10):
        # The broker has no commit event to wait on: re-read, bounded by the timeout.
        while (got := await _committed(bootstrap, group, topic)) != want:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    assert got == want


async def test_commits_only_up_to_the_lowest_unfinished_offset(
    kafka_bootstrap: str, topic: str
) -> None:
    await _produce(kafka_bootstrap, topic, 10)  # one key: one partition, offsets 0..9
    group = f"g-{uuid.uuid4().hex[:8]}"
    source = KafkaSource("posts", _config(kafka_bootstrap), topic=topic, group=group)
    assert isinstance(source, Source)
    await source.start()
    try:
        messages = await _poll_n(source, 10)
        assert sorted(m.offset for m in messages) == list(range(10))
        partition = messages[0].partition
        by_offset = {m.offset: m for m in messages}
        for offset in (4, 0, 1, 3):  # out of order; 2 is still running
            await source.ack(by_offset[offset], Outcome.DONE)
        await _wait_committed(kafka_bootstrap, group, topic, {partition: 2})
        await source.ack(by_offset[2], Outcome.DONE)
        await _wait_committed(kafka_bootstrap, group, topic, {partition: 5})
    finally:
        await source.stop()
    # A new member of the group is handed exactly the unfinished messages.
    again = KafkaSource("posts", _config(kafka_bootstrap), topic=topic, group=group)
    await again.start()
    try:
        redelivered = await _poll_n(again, 5)
        assert sorted(m.offset for m in redelivered) == [5, 6, 7, 8, 9]
        assert await again.poll(10, 0.3) == []
    finally:
        await again.stop()


async def test_dead_letter_is_stored_before_the_offset_is_committed(
    kafka_bootstrap: str, topic: str
) -> None:
    await _produce(kafka_bootstrap, topic, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    dead_topic = f"{topic}-dead"
    await create_topic(kafka_bootstrap, dead_topic, 1)
    source = KafkaSource("posts", _config(kafka_bootstrap), topic=topic, group=group,
                         dead_letter_topic=dead_topic)
    await source.start()
    try:
        [message] = await _poll_n(source, 1)
        record = DeadLetter(source="posts", reason="max_attempts", attempts=3,
                            last_error="boom", original=message.value,
                            partition=message.partition, offset=message.offset)
        with pytest.raises(BrokerError):
            await source.ack(message, Outcome.DEAD)  # no record: refused, not committed
        await source.ack(message, Outcome.DEAD, reason="max_attempts", dead_letter=encode(record))
        await _wait_committed(kafka_bootstrap, group, topic, {message.partition: 1})
    finally:
        await source.stop()
    reader = AIOKafkaConsumer(dead_topic, bootstrap_servers=kafka_bootstrap,
                              auto_offset_reset="earliest", enable_auto_commit=False)
    await reader.start()
    try:
        stored = await reader.getone()
    finally:
        await reader.stop()
    dead = decode_dead_letter(stored.value)
    assert (dead.original, dead.reason, dead.offset) == (b"m0", "max_attempts", 0)
    await delete_topic(kafka_bootstrap, dead_topic)


async def test_revoked_partitions_commit_what_finished_and_drop_late_acks(
    kafka_bootstrap: str, topic: str
) -> None:
    # Six messages on each of the two partitions.
    producer = KafkaProducer(_config(kafka_bootstrap))
    await producer.start()
    for p in range(2):
        for i in range(6):
            await producer._started().send_and_wait(topic, f"p{p}-{i}".encode(), partition=p)
    await producer.stop()

    group = f"g-{uuid.uuid4().hex[:8]}"
    first = KafkaSource("posts", _config(kafka_bootstrap, revoke_grace_s=0.5), topic=topic,
                        group=group)
    await first.start()
    second = KafkaSource("posts", _config(kafka_bootstrap), topic=topic, group=group)
    try:
        messages = await _poll_n(first, 12)
        by_key = {(m.partition, m.offset): m for m in messages}
        # Finish offsets 0-2 of both partitions; 3-5 stay in flight through the rebalance.
        for p in range(2):
            for o in range(3):
                await first.ack(by_key[(p, o)], Outcome.DONE)
        await second.start()  # joining rebalances: `first` keeps one partition at most
        got = await _poll_n(second, 3, within_s=30)
        moved = {m.partition for m in got}
        assert len(moved) == 1
        [partition] = moved
        # The new owner starts right after what `first` had finished.
        assert sorted(m.offset for m in got) == [3, 4, 5]
        # A late ack for the revoked partition is dropped, not committed.
        await first.ack(by_key[(partition, 3)], Outcome.DONE)
        committed = await _committed(kafka_bootstrap, group, topic)
        assert committed[partition] == 3
        for m in got:
            await second.ack(m, Outcome.DONE)
        await _wait_committed(kafka_bootstrap, group, topic,
                              {partition: 6, 1 - partition: 3})
    finally:
        await second.stop()
        await first.stop()


async def test_a_consumer_that_stops_polling_keeps_its_partitions(
    kafka_bootstrap: str, topic: str
) -> None:
    # max_poll_interval 2 s: without the keep-alive aiokafka would leave the group.
    config = _config(kafka_bootstrap, max_poll_interval_ms=2000)
    group = f"g-{uuid.uuid4().hex[:8]}"
    source = KafkaSource("posts", config, topic=topic, group=group)
    await source.start()
    try:
        await _produce(kafka_bootstrap, topic, 3)
        first = await _poll_n(source, 3)
        epochs = dict(source._epochs)
        assert len(epochs) == 2
        await asyncio.sleep(4.5)  # the dispatcher is "full": no poll for > 2 intervals
        assert source._epochs == epochs  # never revoked, never reassigned
        assert source._consumer is not None
        assert source._consumer.assignment() == {TopicPartition(topic, 0),
                                                  TopicPartition(topic, 1)}
        await _produce(kafka_bootstrap, topic, 2)
        later = await _poll_n(source, 2)  # resumed
        assert sorted(m.offset for m in later) == [3, 4]
        for m in first + later:
            await source.ack(m, Outcome.DONE)
    finally:
        await source.stop()


async def test_producer_publish_and_lag(kafka_bootstrap: str, topic: str) -> None:
    producer = KafkaProducer(_config(kafka_bootstrap))
    with pytest.raises(BrokerError):
        await producer.publish(topic, None, b"x")  # not started
    await producer.start()
    try:
        await producer.publish(topic, b"a", b"one")
        await producer.publish_many(topic, [(b"a", b"two"), (b"a", b"three")])
    finally:
        await producer.stop()
    source = KafkaSource("posts", _config(kafka_bootstrap), topic=topic,
                         group=f"g-{uuid.uuid4().hex[:8]}")
    await source.start()
    try:
        got = await _poll_n(source, 1)
        rest = await _poll_n(source, 2) if len(got) < 3 else []
        assert [m.value for m in got + rest] == [b"one", b"two", b"three"]
        assert await source.lag() == 0
    finally:
        await source.stop()


async def test_unreachable_broker_is_a_clear_error() -> None:
    source = KafkaSource("posts", KafkaConfig(bootstrap_servers="127.0.0.1:1"), topic="x")
    with pytest.raises(BrokerError, match="cannot consume"):
        await source.start()


class FlakyProducer:
    """Dead-letter producer double: fails until `heal` is set, then stores for real."""

    def __init__(self, real: KafkaProducer) -> None:
        self.real = real
        self.heal = asyncio.Event()
        self.attempts = 0
        self.attempted = asyncio.Event()

    async def start(self) -> None:
        await self.real.start()

    async def stop(self) -> None:
        await self.real.stop()

    async def publish(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.attempts += 1
        self.attempted.set()
        if not self.heal.is_set():
            raise BrokerError("dead-letter topic unavailable (test double)")
        await self.real.publish(topic, key, value)


async def test_a_failed_dead_letter_produce_is_retried_while_the_partition_waits(
    kafka_bootstrap: str, topic: str
) -> None:
    await _produce(kafka_bootstrap, topic, 3)  # one partition, offsets 0..2
    group = f"g-{uuid.uuid4().hex[:8]}"
    dead_topic = f"{topic}-dead"
    await create_topic(kafka_bootstrap, dead_topic, 1)
    source = KafkaSource("posts", _config(kafka_bootstrap), topic=topic, group=group,
                         dead_letter_topic=dead_topic, dead_letter_backoff_base_s=0.02,
                         dead_letter_backoff_max_s=0.1)
    flaky = FlakyProducer(source._dead_letters)
    source._dead_letters = flaky  # type: ignore[assignment]
    await source.start()
    try:
        m0, m1, m2 = sorted(await _poll_n(source, 3), key=lambda m: m.offset)
        record = DeadLetter(source="posts", reason="max_attempts", attempts=3,
                            last_error="boom", original=m1.value,
                            partition=m1.partition, offset=m1.offset)
        await source.ack(m0, Outcome.DONE)
        await source.ack(m1, Outcome.DEAD, reason="max_attempts", dead_letter=encode(record))
        await source.ack(m2, Outcome.DONE)
        async with asyncio.timeout(10):
            while flaky.attempts < 4:  # the first produce and three retries, all failing
                flaky.attempted.clear()
                await flaky.attempted.wait()
        assert source.dead_letter_failures >= 4
        await source.commit()
        # Commits stop at the dead message while its record is not stored.
        assert (await _committed(kafka_bootstrap, group, topic)) == {m0.partition: 1}
        failures = source.dead_letter_failures
        flaky.heal.set()
        await _wait_committed(kafka_bootstrap, group, topic, {m0.partition: 3})
        assert source.dead_letter_failures in (failures, failures + 1)  # one may race heal
    finally:
        await source.stop()
    reader = AIOKafkaConsumer(dead_topic, bootstrap_servers=kafka_bootstrap,
                              auto_offset_reset="earliest", enable_auto_commit=False)
    await reader.start()
    try:
        batches = await reader.getmany(timeout_ms=2000)
    finally:
        await reader.stop()
    stored = [r for records in batches.values() for r in records]
    assert [decode_dead_letter(r.value).offset for r in stored] == [1]  # stored once
    await delete_topic(kafka_bootstrap, dead_topic)


async def test_dead_letter_retry_ends_on_stop_leaving_the_message_uncommitted(
    kafka_bootstrap: str, topic: str
) -> None:
    await _produce(kafka_bootstrap, topic, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    source = KafkaSource("posts", _config(kafka_bootstrap), topic=topic, group=group,
                         dead_letter_backoff_base_s=0.02, dead_letter_backoff_max_s=0.05)
    flaky = FlakyProducer(source._dead_letters)
    source._dead_letters = flaky  # type: ignore[assignment]
    await source.start()
    try:
        [message] = await _poll_n(source, 1)
        await source.ack(message, Outcome.DEAD, dead_letter=b"record")
        async with asyncio.timeout(10):
            while flaky.attempts < 2:
                flaky.attempted.clear()
                await flaky.attempted.wait()
    finally:
        await source.stop()
    assert not source._dead_letter_retrying  # cancelled, not leaked
    assert (await _committed(kafka_bootstrap, group, topic)) == {}  # redelivered on restart


async def test_end_offsets_and_wait_committed_track_the_group(
    kafka_bootstrap: str, topic: str
) -> None:
    producer = KafkaProducer(_config(kafka_bootstrap))
    await producer.start()
    for p, n in ((0, 3), (1, 2)):
        for i in range(n):
            await producer._started().send_and_wait(topic, f"p{p}-{i}".encode(), partition=p)
    await producer.stop()
    group = f"g-{uuid.uuid4().hex[:8]}"
    source = KafkaSource("posts", _config(kafka_bootstrap), topic=topic, group=group)
    await source.start()
    try:
        ends = await source.end_offsets()  # waits for the first assignment
        assert ends == {0: 3, 1: 2}
        waiting = asyncio.ensure_future(source.wait_committed(ends))
        messages = await _poll_n(source, 5)
        for m in messages[:-1]:
            await source.ack(m, Outcome.DONE)
        await source.commit()
        await asyncio.sleep(0.1)
        assert not waiting.done()  # one message is still unfinished
        await source.ack(messages[-1], Outcome.DONE)
        async with asyncio.timeout(5):
            await waiting
    finally:
        await source.stop()
    # A later member of the same group: the topic is finished, nothing to wait for.
    again = KafkaSource("posts", _config(kafka_bootstrap), topic=topic, group=group)
    await again.start()
    try:
        async with asyncio.timeout(10):
            await again.wait_committed(await again.end_offsets())
    finally:
        await again.stop()
