"""The columnar ranking path (issue 13, feed latency): columns instead of one patch dict
per candidate, the selector's shortlist, the batched ANN search, and signals derived for
served posts only that still add up to the score."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from grebe.feed.ann import PostANNIndex
from grebe.feed.components import Columns, ScoreSelector
from grebe.feed.pipeline import CandidatePipeline


class Q(msgspec.Struct, kw_only=True):
    user: str = "u"
    size: int | None = 3


class Item(msgspec.Struct, kw_only=True):
    id: int
    score: float = 0.0
    tag: str = ""


class Items:
    name = "items"

    def __init__(self, n: int) -> None:
        self.n = n

    async def fetch(self, query: Q) -> list[Item]:
        return [Item(id=i) for i in range(self.n)]


class ColumnScorer:
    """Scores and tags as columns (optionally one value short: a broken scorer)."""

    name = "columns"

    def __init__(self, short: bool = False) -> None:
        self.short = short

    async def score(self, query: Q, candidates: Sequence[Item]) -> Columns:
        scores = np.array([float(c.id) for c in candidates])
        tags = [f"t{c.id}" for c in candidates]
        return Columns(score=scores, tag=tags[:-1] if self.short else tags)


class BySize(ScoreSelector[Q, Item]):
    name = "by_size"

    def tiebreak(self, candidate: Item) -> Any:
        return candidate.id

    def size(self, query: Q) -> int | None:
        return query.size


async def test_columns_are_applied_per_candidate_in_order() -> None:
    pipeline = CandidatePipeline(sources=[Items(5)], scorers=[ColumnScorer()],
                                 selector=BySize())
    result = await pipeline.run(Q())
    assert result.errors == {}
    assert [(i.id, i.score, i.tag) for i in result.selected] == [
        (4, 4.0, "t4"), (3, 3.0, "t3"), (2, 2.0, "t2")]


async def test_a_short_column_is_refused_and_nothing_is_applied() -> None:
    pipeline = CandidatePipeline(sources=[Items(4)], scorers=[ColumnScorer(short=True)],
                                 selector=BySize())
    result = await pipeline.run(Q())
    assert "3 values of 'tag' for 4 candidates" in result.errors["columns"]
    assert all(i.tag == "" and i.score == 0.0 for i in result.retrieved)


async def test_shortlisted_selection_equals_sorting_everything() -> None:
    """Ties (few distinct scores) and NaNs included: the shortlist changes the cost,
    never the page, and each NaN is counted once."""
    rng = random.Random(7)
    for trial in range(200):
        n = rng.randrange(1, 60)
        scores = [rng.choice([0.1, 0.5, 0.5, 0.9, math.nan, -math.inf]) for _ in range(n)]
        size = rng.randrange(0, n + 3)
        items = [Item(id=rng.randrange(10), score=s) for s in scores]
        full = BySize().sort(list(items))[:size]
        selector = BySize()
        got = await selector.select(Q(size=size), list(items))
        assert [id(i) for i in got] == [id(i) for i in full], trial
        assert selector.nan_scores == sum(math.isnan(s) for s in scores), trial


def test_batched_search_equals_one_search_per_vector() -> None:
    rng = np.random.default_rng(1)
    index = PostANNIndex(16)
    vectors = rng.normal(size=(300, 16)).astype(np.float32)
    index.add_many([f"p{i}" for i in range(300)], vectors)
    queries = rng.normal(size=(4, 16)).astype(np.float32)
    queries[2] = 0.0  # a zero vector finds nothing
    exclude = {"p1", "p2", "p3"}
    batched = index.search_many(queries, 10, exclude)
    assert batched == [index.search(q, 10, exclude) for q in queries]
    assert batched[2] == [] and all(len(b) == 10 for i, b in enumerate(batched) if i != 2)
    assert not exclude.intersection(pid for b in batched for pid, _ in b)
    assert index.search_many(queries[:1], 5) == [index.search(queries[0], 5)]
    assert index.search_many(np.empty((0, 16)), 5) == []
