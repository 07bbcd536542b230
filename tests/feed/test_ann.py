"""The usearch-backed ANN index: add, replace, remove, search by cosine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from grebe.feed.ann import ANNError, PostANNIndex
from grebe.feed.indexing import IndexingStore
from grebe.stores.sqlite import SqliteStore
from grebe.types import Annotation


def unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_nearest_by_cosine_most_similar_first() -> None:
    index = PostANNIndex(3)
    index.add("x", unit(1, 0, 0))
    index.add("xy", unit(1, 1, 0))
    index.add("z", unit(0, 0, 1))
    index.add("scaled_x", [5.0, 0.0, 0.0])  # cosine ignores length
    got = index.search(unit(1, 0.1, 0), k=3)
    assert [pid for pid, _ in got][:2] in (["x", "scaled_x"], ["scaled_x", "x"])
    assert got[2][0] == "xy"
    assert got[0][1] == pytest.approx(float(unit(1, 0.1, 0) @ unit(1, 0, 0)), abs=I8_SIMILARITY)


#: How far an int8 index's similarity may be from the float32 cosine (docs/benchmarks.md).
I8_SIMILARITY = 0.02


@pytest.mark.parametrize(("dtype", "tolerance"), [("i8", I8_SIMILARITY), ("f32", 1e-5)])
def test_similarities_within_the_vector_types_precision(dtype: str, tolerance: float) -> None:
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(300, 384)).astype(np.float32)
    queries = rng.normal(size=(20, 384)).astype(np.float32)
    index = PostANNIndex(384, dtype=dtype)
    index.add_many([f"p{i}" for i in range(300)], vectors * rng.uniform(0.01, 50, (300, 1)))
    normed = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    for query, found in zip(queries, index.search_many(queries, 50), strict=True):
        exact = normed @ (query / np.linalg.norm(query))
        for pid, similarity in found:
            assert similarity == pytest.approx(exact[int(pid[1:])], abs=tolerance)


def test_unknown_vector_type_is_refused() -> None:
    with pytest.raises(ANNError, match="dtype"):
        PostANNIndex(3, dtype="f64")


def test_remove_replace_and_exclude() -> None:
    index = PostANNIndex(2)
    index.add_many(["a", "b"], [[1.0, 0.0], [0.0, 1.0]])
    assert index.remove("a") and not index.remove("a")
    assert [pid for pid, _ in index.search([1.0, 0.0], k=2)] == ["b"]
    index.add("b", [1.0, 0.0])  # re-adding replaces the vector
    assert len(index) == 1
    assert index.search([1.0, 0.0], k=1)[0][1] == pytest.approx(1.0, abs=1e-5)
    assert index.search([1.0, 0.0], k=1, exclude={"b"}) == []


def test_many_posts_recall() -> None:
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(2000, 32)).astype(np.float32)
    index = PostANNIndex(32)
    index.add_many([f"p{i}" for i in range(2000)], vectors)
    normed = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    hits = 0
    for q in range(50):
        exact = {f"p{i}" for i in np.argsort(-(normed @ normed[q]))[:10]}
        hits += len(exact & {pid for pid, _ in index.search(vectors[q], k=10)})
    assert hits / 500 >= 0.9  # HNSW is approximate, but not by much at this size


def test_bad_vectors_are_refused() -> None:
    index = PostANNIndex(3)
    with pytest.raises(ANNError):
        index.add("a", [1.0, 2.0])
    with pytest.raises(ANNError):
        index.add("a", [float("nan"), 0.0, 1.0])
    with pytest.raises(ANNError):
        index.add_many(["a", "b"], [[1.0, 0.0, 0.0]])
    index.add("zero", [0.0, 0.0, 0.0])  # no direction: not indexed, not an error
    assert "zero" not in index
    assert index.search([0.0, 0.0, 0.0], k=3) == []


async def test_indexing_store_adds_a_batch_in_one_call_last_write_wins(
        tmp_path: Path) -> None:
    """A batch goes to the index at once; a post written twice keeps its last vector
    (and is found once), a vector of another dimension or a zero vector is not
    indexed, another producer's is skipped when a producer is set."""
    store = SqliteStore(tmp_path / "a.db")
    await store.start()
    index = PostANNIndex(2)
    writer = IndexingStore(store, index, producer="emb")

    def ann(pid: str, vector: list[float] | None, producer: str = "emb") -> Annotation:
        return Annotation(post_id=pid, producer=producer, version="1", embedding=vector)

    try:
        await writer.upsert([ann("a", [1.0, 0.0]), ann("b", [0.0, 1.0]),
                             ann("a", [0.0, 1.0]), ann("c", [1.0, 0.0, 0.0]),
                             ann("d", [0.0, 0.0]), ann("e", [1.0, 0.0], producer="other"),
                             ann("f", None)])
        assert set(index._keys) == {"a", "b"} and len(index) == 2
        got = index.search([0.0, 1.0], k=5)
        assert sorted(pid for pid, _ in got) == ["a", "b"]
        assert all(sim == pytest.approx(1.0, abs=1e-4) for _, sim in got)  # ±127 exactly
    finally:
        await store.stop()


class DepthSpy:
    """Wraps the usearch index and records the depth each search asked for."""

    def __init__(self, index: object) -> None:
        self.index = index
        self.depths: list[int] = []

    def search(self, queries: np.ndarray, count: int, **kw: object) -> object:
        self.depths.append(count)
        return self.index.search(queries, count, **kw)  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self.index)  # type: ignore[arg-type]


def test_search_depth_does_not_grow_with_far_exclusions_and_deepens_when_needed() -> None:
    """A viewer's seen posts grow to thousands: asking the index for k + all of them
    made every request slower. Far exclusions cost nothing now; when the excluded posts
    are the nearest ones, the search goes deeper until it has k."""
    rng = np.random.default_rng(5)
    index = PostANNIndex(8)
    vectors = rng.normal(size=(3000, 8)).astype(np.float32)
    ids = [f"p{i}" for i in range(3000)]
    index.add_many(ids, vectors)
    spy = DepthSpy(index._index)
    index._index = spy  # type: ignore[assignment]
    query = vectors[0]

    far = {f"gone{i}" for i in range(5000)}  # seen long ago, not in the index
    got = index.search(query, 10, far)
    assert len(got) == 10 and spy.depths == [10 + 10 + 8]

    spy.depths.clear()
    cosine = vectors @ query / np.linalg.norm(vectors, axis=1) / np.linalg.norm(query)
    nearest = {ids[i] for i in np.argsort(-cosine)[:400].tolist()}
    got = index.search(query, 10, nearest)
    assert len(got) == 10 and not nearest.intersection(pid for pid, _ in got)
    assert len(spy.depths) > 1 and spy.depths[0] == 28  # deepened only because needed
    assert [b for b in index.search_many(vectors[:3], 10, nearest)] == [
        index.search(v, 10, nearest) for v in vectors[:3]]
