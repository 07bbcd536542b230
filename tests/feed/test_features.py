"""The feature cache in front of the annotation store (issue 13: ranking 1,500
candidates cannot afford one store read each per request)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grebe.feed.ann import PostANNIndex
from grebe.feed.candidates import HomeQuery
from grebe.feed.features import FeatureCache
from grebe.feed.indexing import IndexingStore
from grebe.stores.sqlite import SqliteStore
from grebe.types import Annotation


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_reads_once_sees_writes_through_the_feed_and_expires(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "a.db")
    await store.start()
    clock = Clock()
    cache = FeatureCache(store, None, size=2, ttl_s=60, concurrency=4, clock=clock)
    writer = IndexingStore(store, PostANNIndex(2), on_write=cache.invalidate)
    try:
        await writer.upsert([
            Annotation(post_id="p1", producer="s", version="1", labels=["safe"],
                       scores={"quality": 0.2}, embedding=[1.0, 0.0]),
            Annotation(post_id="p2", producer="s", version="1", labels=["nsfw"]),
        ])
        got = await cache.get_many(["p1", "p2", "p1"])
        assert got[0]["labels"] == ["safe"] and got[1]["labels"] == ["nsfw"]
        assert isinstance(got[0]["embedding"], np.ndarray) and got[1]["embedding"] is None
        assert cache.misses == 2 and cache.hits == 1
        await cache.get_many(["p1"])
        assert cache.hits == 2
        # A write through the feed is seen at once...
        await writer.upsert([Annotation(post_id="p1", producer="q", version="1",
                                        scores={"quality": 0.9})])
        assert (await cache.get_many(["p1"]))[0]["scores"]["quality"] == 0.9
        # ...a write around it once the entry has expired.
        await store.upsert([Annotation(post_id="p2", producer="s", version="1",
                                       labels=["safe"])])
        assert (await cache.get_many(["p2"]))[0]["labels"] == ["nsfw"]
        clock.now += 61
        assert (await cache.get_many(["p2"]))[0]["labels"] == ["safe"]
        await cache.get_many(["p3"])
        assert len(cache) == 2  # bounded
    finally:
        await store.stop()


class CountingStore(SqliteStore):
    """Counts reads, to show which go to the store."""

    reads = 0

    async def get(self, post_id: str) -> list[Annotation]:
        self.reads += 1
        return await super().get(post_id)


async def test_interest_vectors_read_through_the_cache_equal_the_store(
        tmp_path: Path) -> None:
    from grebe.feed.hydrators import InterestHydrator
    from grebe.feed.settings import FeedSettings
    from grebe.feed.viewers import MemoryViewerDirectory, Viewer

    store = CountingStore(tmp_path / "a.db")
    await store.start()
    settings = FeedSettings()
    rng = np.random.default_rng(1)
    try:
        await store.upsert([
            Annotation(post_id=f"p{i}", producer="embedding", version="1",
                       embedding=rng.normal(size=6).tolist()) for i in range(4)])
        await store.upsert([Annotation(post_id="p9", producer="s", version="1")])
        viewers = MemoryViewerDirectory()
        viewers.viewers["v"] = Viewer(user_id="v", engaged=["p0", "p9", "p2", "p3"])
        cache = FeatureCache(store, settings.embedding_producer, size=100, ttl_s=60,
                             concurrency=4)
        plain = InterestHydrator(viewers, store, None, None, settings)
        cached = InterestHydrator(viewers, store, None, None, settings, cache)
        query = HomeQuery(user_id="v")
        expected = await plain.hydrate(query)
        assert store.reads == 4
        for _ in range(3):
            got = await cached.hydrate(query)
            assert np.allclose(got["interest_vectors"], expected["interest_vectors"])
            assert np.allclose(got["interest_vector"], expected["interest_vector"])
        assert len(expected["interest_vectors"]) == 3  # p9 has no embedding
        assert store.reads == 8  # the cache read each post once, then kept it
    finally:
        await store.stop()


async def test_entries_expire_oldest_first_and_a_reread_moves_to_the_end(
        tmp_path: Path) -> None:
    """Expiry drops only the entries read more than ttl_s ago (the oldest prefix): a post
    read later is still served from memory, one read again starts a new period."""
    store = CountingStore(tmp_path / "a.db")
    await store.start()
    clock = Clock()
    cache = FeatureCache(store, None, size=10, ttl_s=60, concurrency=4, clock=clock)
    try:
        await store.upsert([Annotation(post_id=p, producer="s", version="1", labels=[p])
                            for p in ("p1", "p2", "p3")])
        await cache.get_many(["p1"])
        clock.now = 30
        await cache.get_many(["p2"])
        clock.now = 61  # p1 expired, p2 not
        await cache.get_many(["p1", "p2"])
        assert store.reads == 3 and len(cache) == 2
        clock.now = 95  # p2 (read at 30) expired; p1 (re-read at 61) not
        got = await cache.get_many(["p2", "p1", "p3"])
        assert [f["labels"] for f in got] == [["p2"], ["p1"], ["p3"]]
        assert store.reads == 5 and cache.hits == 2
    finally:
        await store.stop()
