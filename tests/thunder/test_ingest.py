"""Ingest: apply then ack, dead-letter bad input, ready at head; on the real local log."""

from __future__ import annotations

import time

from grebe import codec
from grebe.brokers.memory import MemorySource
from grebe.core.source import Outcome
from grebe.thunder.events import PostCreate, PostDelete, decode_event, encode_event
from grebe.thunder.ingest import ThunderIngest
from grebe.thunder.metrics import ThunderMetrics
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import InNetworkQuery, ThunderStore
from grebe.types import Envelope, Media, Post

SETTINGS = ThunderSettings(poll_batch=4, poll_timeout_s=0.05)


def create(pid: str, author: str) -> bytes:
    return encode_event(PostCreate(post_id=pid, author_id=author, created_at=time.time()))


def test_decode_accepts_events_envelopes_and_bare_posts() -> None:
    post = Post(id="p", author_id="a", created_at=1.0,
                media=(Media(kind="video", url="https://x/v.mp4"),))
    from_envelope = decode_event(codec.encode(Envelope(post=post)))
    from_post = decode_event(codec.encode(post))
    assert from_envelope == from_post
    assert isinstance(from_post, PostCreate) and from_post.has_video
    assert from_post.conversation_id == "p"
    assert decode_event(encode_event(PostDelete(post_id="p"))) == PostDelete(post_id="p")


async def test_applies_then_acks_and_dead_letters_bad_messages() -> None:
    source = MemorySource("thunder-events")
    store = ThunderStore(SETTINGS)
    metrics = ThunderMetrics()
    ingest = ThunderIngest(source, store, SETTINGS, metrics)
    for i in range(6):
        source.put(create(f"p{i}", "a"))
    source.put(b"{not json")
    source.put(b'{"type": "post_delete"}')  # missing post_id
    source.put(encode_event(PostDelete(post_id="p0")))
    source.put(b'{"post": {"id": "p1"}}')  # only ids: stored already or not, never blanked
    source.put(b'{"user": {"id": "u"}}')  # only a user: nothing to store
    await ingest.start()
    try:
        await ingest.wait_ready(timeout_s=5)
        await source.wait_acked(11)
    finally:
        await ingest.stop()
    assert len(store) == 5 and "p0" not in store
    stored = store.get("p1")
    assert stored is not None and stored.author_id == "a"
    outcomes = [a.outcome for a in source.acks]
    assert outcomes.count(Outcome.DEAD) == 2 and outcomes.count(Outcome.DONE) == 9
    assert len(source.dead_letters) == 2
    dead = codec.decode_dead_letter(source.dead_letters[0])
    assert dead.original == b"{not json" and "malformed" in dead.reason
    assert not source.unacked
    assert metrics.registry.get_sample_value(
        "grebe_thunder_ingest_events_total", {"outcome": "create"}) == 6
    assert metrics.registry.get_sample_value("grebe_thunder_ingest_ready") == 1


async def test_not_ready_until_the_backlog_is_applied() -> None:
    source = MemorySource("thunder-events")
    store = ThunderStore(SETTINGS)
    ingest = ThunderIngest(source, store, SETTINGS)
    for i in range(10):  # more than one poll batch
        source.put(create(f"p{i}", "a"))
    seen_at_ready: list[int] = []

    async def watch() -> None:
        await ingest.ready.wait()
        seen_at_ready.append(len(store))

    import asyncio

    watcher = asyncio.create_task(watch())
    await ingest.start()
    try:
        await asyncio.wait_for(watcher, 5)
    finally:
        await ingest.stop()
    assert seen_at_ready == [10]


async def test_on_the_real_local_log(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from grebe.brokers.local import LocalLog, LocalProducer, LocalSource

    path = tmp_path / "log.db"
    producer = LocalProducer(LocalLog(path, partitions=2))
    await producer.start()
    now = time.time()
    posts = [Post(id=f"p{i}", author_id=f"a{i % 3}", created_at=now - 100 + i) for i in range(9)]
    await producer.publish_many("posts", [(p.author_id.encode(), codec.encode(Envelope(post=p)))
                                          for p in posts])
    await producer.publish("posts", b"a0", encode_event(PostDelete(post_id="p0")))
    await producer.stop()

    def source() -> LocalSource:
        return LocalSource("thunder", LocalLog(path, partitions=2), topic="posts",
                           group="thunder", commit_interval_s=0.01)

    store = ThunderStore(SETTINGS)
    ingest = ThunderIngest(source(), store, SETTINGS)
    await ingest.start()
    try:
        await ingest.wait_ready(timeout_s=10)
    finally:
        await ingest.stop()
    assert len(store) == 8 and store.is_deleted("p0")
    got = store.get_in_network_posts(InNetworkQuery(user_id="v", following_user_ids=["a0"]))
    assert [p.post_id for p in got.posts] == ["p6", "p3"]

    # Offsets were committed after applying: a restarted consumer gets nothing again.
    again = source()
    await again.start()
    try:
        assert await again.poll(100, 0.05) == []
    finally:
        await again.stop()
