"""The feature cache in front of the annotation store (issue 13: ranking 1,500
candidates cannot afford one store read each per request)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grebe.feed.ann import PostANNIndex
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
