"""The feature cache in front of the annotation store (issue 13: ranking 1,500
candidates cannot afford one store read each per request)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from grebe.feed.ann import PostANNIndex
from grebe.feed.candidates import HomeQuery
from grebe.feed.features import LABEL_SET, FeatureCache
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


async def test_the_ranker_reads_the_scores_it_weighs_as_columns(tmp_path: Path) -> None:
    """The annotation hydrator gives quality and engagement as float columns (the score,
    or its default where absent), and the ranker given those columns scores a frame as
    it scores the same candidates from their scores dicts."""
    from grebe.feed.candidates import FeedCandidate
    from grebe.feed.components import apply_patches
    from grebe.feed.home import build_home_pipeline
    from grebe.feed.hydrators import AnnotationHydrator
    from grebe.feed.scorers import WeightedScorer
    from grebe.feed.settings import FeedSettings
    from grebe.feed.sources import candidate, candidate_frame
    from grebe.thunder.events import PostCreate
    from grebe.thunder.store import ThunderStore

    store = SqliteStore(tmp_path / "a.db")
    await store.start()
    try:
        settings = FeedSettings.model_validate({"quality_default": 0.4})
        thunder = ThunderStore()
        feed = build_home_pipeline(settings, store, thunder, None, dim=2)
        for i in range(6):
            thunder.apply(PostCreate(post_id=f"p{i}", author_id="a",
                                     created_at=time.time() - 100 + i))
        await feed.annotations.upsert([
            Annotation(post_id=f"p{i}", producer="s", version="1", embedding=[1.0, i],
                       scores={"quality": i / 10, "engagement": 0.5} if i % 2 else {})
            for i in range(6)])
        posts = [thunder.get(f"p{i}") for i in range(6)]
        frame = candidate_frame(posts, in_network=True, sources="thunder")  # type: ignore[arg-type]
        objects = [candidate(p, in_network=True, source="thunder") for p in posts]  # type: ignore[arg-type]
        assert feed.features is not None
        hydrator = AnnotationHydrator(feed.features)
        query = HomeQuery(user_id="v", interest_vectors=[[0.0, 1.0]])
        columns = await hydrator.hydrate(query, frame)
        assert list(columns["quality"]) == [0.4, 0.1, 0.4, 0.3, 0.4, 0.5]
        assert list(columns["engagement"]) == [0.0, 0.5, 0.0, 0.5, 0.0, 0.5]
        apply_patches(frame, columns)
        apply_patches(objects, [  # the dicts alone, as a list source's candidates get them
            {"labels": c.labels, "scores": c.scores, "embedding": c.embedding}
            for c in frame])
        assert all(isinstance(c, FeedCandidate) and c.quality is None for c in objects)
        scorer = WeightedScorer(settings)
        assert np.allclose((await scorer.score(query, frame))["score"],
                           (await scorer.score(query, objects))["score"])
    finally:
        await store.stop()


def _same(got: dict[str, object], want: dict[str, object]) -> None:
    """One post's features from the table equal the definition (`features_of`)."""
    assert set(got) == set(want)
    for key, value in want.items():
        if isinstance(value, np.ndarray) or isinstance(got[key], np.ndarray):
            assert value is not None and got[key] is not None
            assert np.array_equal(got[key], value), key  # type: ignore[arg-type]
        else:
            assert got[key] == value, key


async def test_columns_are_the_features_of_each_post_gathered(tmp_path: Path) -> None:
    """The feature table (issue 13, feed CPU): `columns` gives, per post in order, what
    `features_of` makes of its annotations, the embeddings as one n x dim float32
    matrix when every post has one of the table's dimension, else one array (or None)
    per post, and the code of its label set. Through slot reuse (invalidated and
    dropped posts), a cache too small for one request, and no cache at all."""
    from grebe.feed.features import features_of

    store = SqliteStore(tmp_path / "a.db")
    await store.start()
    rng = np.random.default_rng(5)
    numbers = {"quality": ("quality", 0.5), "engagement": ("engagement", 0.0)}
    try:
        await store.upsert([
            Annotation(post_id=f"p{i}", producer="s", version="1",
                       labels=["nsfw"] if i % 3 == 0 else ["safe"],
                       scores={"quality": i / 20} if i % 2 else {"engagement": 0.25},
                       embedding=rng.normal(size=4).tolist())
            for i in range(20)])
        await store.upsert([
            Annotation(post_id="bare", producer="s", version="1", labels=["safe"]),
            Annotation(post_id="wide", producer="s", version="1",
                       embedding=rng.normal(size=6).tolist())])

        async def definition(post_id: str) -> dict[str, object]:
            return dict(features_of(await store.get(post_id), None, numbers))

        for size in (64, 3, 0):
            cache = FeatureCache(store, None, size=size, ttl_s=60, concurrency=4,
                                 numbers=numbers)
            for ids in (["p1", "p2", "p1", "p7"], [f"p{i}" for i in range(20)],
                        ["p4", "bare", "p4"], ["wide", "p5"], ["p9"] * 3):
                got = await cache.columns(ids)
                assert set(got) == {"labels", "scores", "embedding", *numbers, LABEL_SET}
                codes = got.pop(LABEL_SET)
                for i, post_id in enumerate(ids):
                    _same({key: got[key][i] for key in got}, await definition(post_id))
                    # The label-set code names the post's labels (grebe.feed.labels).
                    assert cache.label_sets.labels(int(codes[i])) == \
                        frozenset(got["labels"][i]), post_id
                matrix = "bare" not in ids and "wide" not in ids
                assert (got["embedding"].ndim == 2) is matrix, (size, ids)
                if matrix:
                    assert got["embedding"].dtype == np.float32
                    assert got["embedding"].shape == (len(ids), 4)
                assert got["quality"].dtype == np.float64
            assert len(cache) <= size
            held = await cache.get_many(["p1"])
            cache.invalidate(["p1", "p2"])  # their slots go to the next reads
            await cache.columns(["p10", "p11", "p12"])
            _same(dict(held[0]), await definition("p1"))  # a copy, not the slot's row
            _same(dict((await cache.get_many(["p1"]))[0]), await definition("p1"))
    finally:
        await store.stop()


async def test_columns_stay_right_when_reads_meanwhile_reuse_slots(tmp_path: Path) -> None:
    """Two requests hydrate at once through a cache of 4 posts: while one waits for its
    store reads, the other's reads drop posts and reuse their slots. Each still gets
    its own posts' features (slots are looked up again once the reads are done)."""
    import asyncio

    from grebe.feed.features import features_of

    store = SqliteStore(tmp_path / "a.db")
    await store.start()
    try:
        await store.upsert([Annotation(post_id=f"p{i}", producer="s", version="1",
                                       labels=[f"l{i}"], embedding=[float(i), 1.0])
                            for i in range(12)])
        cache = FeatureCache(store, None, size=4, ttl_s=60, concurrency=2)
        first, second = [f"p{i}" for i in range(6)], [f"p{i}" for i in range(6, 12)]
        for _ in range(3):
            a, b = await asyncio.gather(cache.columns(first), cache.columns(second))
            for ids, got in ((first, a), (second, b)):
                assert [labels[0] for labels in got["labels"]] == \
                    [f"l{pid[1:]}" for pid in ids]
                for post_id, vector in zip(ids, got["embedding"], strict=True):
                    stored = features_of(await store.get(post_id), None)["embedding"]
                    assert np.array_equal(vector, stored), post_id
    finally:
        await store.stop()


async def test_ids_are_found_by_value_through_slot_reuse_and_hash_collisions(
        tmp_path: Path) -> None:
    """The slots are looked up by the ids' hashes (SlotIndex): ids equal to the ones
    read but other string objects (as a gRPC thunder answer's are) find their posts,
    a slot given to another post after a drop or an invalidation answers for that post
    only, and two ids of one hash are told apart by value."""
    store = CountingStore(tmp_path / "a.db")
    await store.start()
    cache = FeatureCache(store, None, size=3, ttl_s=60, concurrency=4)
    try:
        await store.upsert([Annotation(post_id=f"p{i}", producer="s", version="1",
                                       labels=[f"l{i}"]) for i in range(6)])

        def fresh(post_id: str) -> str:  # an equal string, not the same object
            return "".join(list(post_id))

        assert [f["labels"] for f in await cache.get_many(["p0", "p1", "p2"])] == \
            [["l0"], ["l1"], ["l2"]]
        reads = store.reads
        got = await cache.columns([fresh(p) for p in ("p2", "p0", "p1")])
        assert got["labels"].tolist() == [["l2"], ["l0"], ["l1"]] and store.reads == reads
        cache.invalidate([fresh("p1")])  # its slot is free, then p3's
        await cache.get_many(["p3", "p4"])  # p4 drops p0, the oldest read
        got = await cache.columns([fresh(p) for p in ("p0", "p1", "p2", "p3", "p4")])
        assert got["labels"].tolist() == [[f"l{i}"] for i in range(5)]
        # Two held ids with one hash (forced here): each its own features.
        index = cache._index
        index.shared.add(hash("p3"))
        index.slots[index._probe(index._keys(["p3"]))] = cache._slots["p4"]
        got = await cache.columns(["p3", "p4"])
        assert got["labels"].tolist() == [["l3"], ["l4"]]
    finally:
        await store.stop()
