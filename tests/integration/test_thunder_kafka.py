"""Thunder ingest on the real Kafka broker: creates, a delete and a quoted-delete on a
3-partition topic, read by ThunderIngest through a KafkaSource consumer group.

Checked on the broker itself: `ready` is set only once the whole backlog is applied,
deletes leave tombstones, bad messages land on the dead-letter topic without stopping
ingest, and the group's committed offsets cover what was applied (a second ingest on
the same group starts after them).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from grebe import codec
from grebe.brokers.kafka import KafkaProducer, KafkaSource, create_topic, delete_topic
from grebe.config import KafkaConfig
from grebe.thunder.events import (
    PostCreate,
    PostDelete,
    QuotedPostDelete,
    ThunderEvent,
    encode_event,
)
from grebe.thunder.ingest import ThunderIngest
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import ThunderStore
from grebe.types import DeadLetter

pytestmark = pytest.mark.integration

PARTITIONS = 3
# Small batches: the backlog takes several polls, so a premature `ready` would show.
SETTINGS = ThunderSettings(poll_batch=8, poll_timeout_s=0.3, replay_on_start=False)
BAD = [b"{not json", b'{"type": "post_delete"}']  # malformed; a delete without post_id


@dataclass
class Topics:
    bootstrap: str
    topic: str
    dead: str
    group: str

    def config(self) -> KafkaConfig:
        return KafkaConfig(bootstrap_servers=self.bootstrap, session_timeout_ms=6000,
                           commit_interval_s=0.05, revoke_grace_s=1.0)

    def source(self) -> KafkaSource:
        return KafkaSource("thunder", self.config(), topic=self.topic, group=self.group,
                           dead_letter_topic=self.dead)


@pytest.fixture
async def topics(kafka_bootstrap: str) -> AsyncIterator[Topics]:
    tag = uuid.uuid4().hex[:8]
    t = Topics(kafka_bootstrap, f"thunder-in-{tag}", f"thunder-dead-{tag}", f"thunder-{tag}")
    await create_topic(kafka_bootstrap, t.topic, PARTITIONS)
    await create_topic(kafka_bootstrap, t.dead, 1)
    yield t
    for name in (t.topic, t.dead):
        await delete_topic(kafka_bootstrap, name)


async def produce(t: Topics, records: list[tuple[bytes | None, bytes]]) -> None:
    producer = KafkaProducer(t.config())
    await producer.start()
    try:
        await producer.publish_many(t.topic, records)
    finally:
        await producer.stop()


async def committed(t: Topics) -> dict[int, int]:
    """The group's committed offsets, read from the broker (partition: next offset)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=t.bootstrap, group_id=t.group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        out = {}
        for p in range(PARTITIONS):
            offset = await consumer.committed(TopicPartition(t.topic, p))
            out[p] = offset or 0
        return out
    finally:
        await consumer.stop()


async def end_offsets(t: Topics) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=t.bootstrap)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(t.topic, p) for p in range(PARTITIONS)])
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


async def dead_letters(t: Topics, expected: int) -> list[DeadLetter]:
    consumer = AIOKafkaConsumer(t.dead, bootstrap_servers=t.bootstrap,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    got: list[DeadLetter] = []
    try:
        async with asyncio.timeout(10):
            while len(got) < expected:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(codec.decode_dead_letter(r.value) for r in records)
    finally:
        await consumer.stop()
    return got


class ReadyProbe(asyncio.Event):
    """`ready` that records how much ingest had handled at the moment it was set."""

    def __init__(self, ingest: ThunderIngest) -> None:
        super().__init__()
        self.ingest = ingest
        self.handled_at_set: int | None = None

    def set(self) -> None:
        if self.handled_at_set is None:
            i = self.ingest
            self.handled_at_set = i.applied + i.ignored + i.dead
        super().set()


def watch_applies(store: ThunderStore, post_ids: set[str]) -> asyncio.Event:
    """An event set once the store was handed an event for each of `post_ids`."""
    seen: set[str] = set()
    done = asyncio.Event()
    apply = store.apply

    def watching(event: ThunderEvent, now: float | None = None) -> bool:
        changed = apply(event, now)
        seen.add(event.post_id)
        if post_ids <= seen:
            done.set()
        return changed

    store.apply = watching  # type: ignore[method-assign]
    return done


def backlog(now: float) -> list[tuple[bytes | None, bytes]]:
    creates = [PostCreate(post_id=f"p{i}", author_id=f"a{i % 4}", created_at=now - 100 + i)
               for i in range(30)]
    creates.append(PostCreate(post_id="q1", author_id="a9", created_at=now - 10,
                              quote_of_post_id="p1"))
    events = [
        *creates,
        PostDelete(post_id="p2", author_id="a2", deleted_at=now - 5),
        QuotedPostDelete(post_id="q1", quoted_post_id="p1", deleted_at=now - 4),
    ]
    return [(e.post_id.encode(), encode_event(e)) for e in events]


async def test_ingest_catches_up_applies_deletes_and_commits(topics: Topics) -> None:
    now = time.time()
    records = backlog(now)
    # Bad messages in the middle of the stream: dead-lettered, ingest goes on.
    records[10:10] = [(b"bad0", BAD[0])]
    records[20:20] = [(b"bad1", BAD[1])]
    await produce(topics, records)
    total = len(records)

    store = ThunderStore(SETTINGS)
    ingest = ThunderIngest(topics.source(), store, SETTINGS)
    probe = ingest.ready = ReadyProbe(ingest)
    await ingest.start()
    try:
        await ingest.wait_ready(timeout_s=15)
        # Set only with the whole backlog handled (applied, ignored or dead).
        assert probe.handled_at_set == total
        assert await ingest.lag_messages() == 0
        assert ingest.dead == 2
        assert ingest.applied == total - 2

        assert len(store) == 29  # 31 creates less p2 (deleted) and q1 (quoted-deleted)
        assert "p2" not in store and store.is_deleted("p2")
        assert "q1" not in store and store.is_deleted("q1")
        assert "p1" in store and not store.is_deleted("p1")  # the quoted post stays

        # Live (after ready): a late create of a deleted post is refused by its tombstone.
        both_seen = watch_applies(store, {"p2", "p99"})
        await produce(topics, [(e.post_id.encode(), encode_event(e)) for e in (
            PostCreate(post_id="p2", author_id="a2", created_at=now),
            PostCreate(post_id="p99", author_id="a1", created_at=now))])
        await asyncio.wait_for(both_seen.wait(), 10)
        assert "p99" in store and "p2" not in store
    finally:
        await ingest.stop()  # commits what was acked, then leaves the group

    # The dead letters are on the broker, each with its original bytes.
    letters = await dead_letters(topics, 2)
    assert sorted(d.original for d in letters) == sorted(BAD)
    assert all(d.source == "thunder" and d.reason for d in letters)
    assert {d.reason.split(":")[0] for d in letters} == {"malformed", "schema"}

    # Committed after applying: everything the topic holds, per partition.
    ends = await end_offsets(topics)
    assert sum(ends.values()) == total + 2
    assert await committed(topics) == ends

    # A second ingest on the same group starts after the commits: only new events.
    await produce(topics, [(b"p100", encode_event(PostCreate(
        post_id="p100", author_id="a3", created_at=now)))])
    second_store = ThunderStore(SETTINGS)
    second = ThunderIngest(topics.source(), second_store, SETTINGS)
    await second.start()
    try:
        await second.wait_ready(timeout_s=15)
    finally:
        await second.stop()
    assert set(second_store.by_id) == {"p100"}
    assert second.applied == 1 and second.dead == 0
