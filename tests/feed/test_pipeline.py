"""The candidate-pipeline framework's contract, with small components written here."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import msgspec

from grebe.feed.components import PipelineResult
from grebe.feed.pipeline import CandidatePipeline


class Q(msgspec.Struct, kw_only=True):
    user: str
    boost: float = 0.0
    region: str = ""


class Item(msgspec.Struct, kw_only=True):
    id: int
    source: str = ""
    tag: str = ""
    score: float = 0.0


class Boost:
    name = "boost"

    async def hydrate(self, query: Q) -> dict[str, Any]:
        return {"boost": 10.0}


class Region:
    name = "region"

    async def hydrate(self, query: Q) -> dict[str, Any]:
        return {"region": "eu"}


class Numbers:
    def __init__(self, name: str, ids: Sequence[int], delay: float = 0.0) -> None:
        self.name, self.ids, self.delay = name, ids, delay

    async def fetch(self, query: Q) -> list[Item]:
        await asyncio.sleep(self.delay)
        return [Item(id=i, source=self.name) for i in self.ids]


class Broken:
    name = "broken"

    async def fetch(self, query: Q) -> list[Item]:
        raise RuntimeError("backend down")

    async def hydrate(self, query: Q, candidates: Sequence[Item]) -> list[dict[str, Any]]:
        raise RuntimeError("backend down")

    async def filter(self, query: Q, candidates: list[Item]) -> tuple[list[Item], list[Item]]:
        raise RuntimeError("backend down")

    async def score(self, query: Q, candidates: Sequence[Item]) -> list[dict[str, Any]]:
        raise RuntimeError("backend down")

    async def select(self, query: Q, candidates: list[Item]) -> list[Item]:
        raise RuntimeError("backend down")


class Tagger:
    name = "tagger"

    async def hydrate(self, query: Q, candidates: Sequence[Item]) -> list[dict[str, Any]]:
        return [{"tag": "even" if c.id % 2 == 0 else "odd"} for c in candidates]


class ShortTagger:
    """Returns one patch too few: must be rejected, not misaligned."""

    name = "short_tagger"

    async def hydrate(self, query: Q, candidates: Sequence[Item]) -> list[dict[str, Any]]:
        return [{"tag": "WRONG"} for _ in candidates[1:]]


class DropOdd:
    name = "drop_odd"

    async def filter(self, query: Q, candidates: list[Item]) -> tuple[list[Item], list[Item]]:
        return ([c for c in candidates if c.tag == "even"],
                [c for c in candidates if c.tag != "even"])


class LossyFilter:
    """Loses candidates (kept + removed != input): rejected."""

    name = "lossy"

    async def filter(self, query: Q, candidates: list[Item]) -> tuple[list[Item], list[Item]]:
        return candidates[:1], []


class ById:
    name = "by_id"

    async def score(self, query: Q, candidates: Sequence[Item]) -> list[dict[str, Any]]:
        return [{"score": c.id + query.boost} for c in candidates]


class Double:
    """Sees the scores of the scorer before it."""

    name = "double"

    async def score(self, query: Q, candidates: Sequence[Item]) -> list[dict[str, Any]]:
        return [{"score": c.score * 2} for c in candidates]


class TooMany:
    name = "too_many"

    async def score(self, query: Q, candidates: Sequence[Item]) -> list[dict[str, Any]]:
        return [{"score": -1.0} for _ in range(len(candidates) + 1)]


class Top2:
    name = "top2"

    async def select(self, query: Q, candidates: list[Item]) -> list[Item]:
        return sorted(candidates, key=lambda c: -c.score)[:2]


class Slow:
    name = "slow"

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.done: list[int] = []

    async def run(self, query: Q, result: PipelineResult[Q, Item]) -> None:
        await self.release.wait()
        self.done.extend(c.id for c in result.selected)


class Exploding:
    name = "exploding"

    async def run(self, query: Q, result: PipelineResult[Q, Item]) -> None:
        raise RuntimeError("side effect failed")


def pipeline(**kw: Any) -> CandidatePipeline[Q, Item]:
    base: dict[str, Any] = {
        "query_hydrators": [Boost(), Region()],
        "sources": [Numbers("a", [1, 2, 3]), Numbers("b", [4, 5, 6])],
        "hydrators": [Tagger()],
        "filters": [DropOdd()],
        "scorers": [ById(), Double()],
        "selector": Top2(),
    }
    base.update(kw)
    return CandidatePipeline(**base)


async def test_the_happy_path() -> None:
    result = await pipeline().run(Q(user="v"))
    assert result.query.boost == 10.0 and result.query.region == "eu"
    assert [c.id for c in result.retrieved] == [1, 2, 3, 4, 5, 6]
    assert {f.candidate.id for f in result.filtered} == {1, 3, 5}
    assert result.filtered_by() == {"drop_odd": 3}
    assert [(c.id, c.score) for c in result.selected] == [(6, 32.0), (4, 28.0)]
    assert result.errors == {}


async def test_sources_run_in_parallel() -> None:
    sources = [Numbers(f"s{i}", [i], delay=0.2) for i in range(5)]
    started = time.perf_counter()
    result = await pipeline(sources=sources, filters=[]).run(Q(user="v"))
    assert time.perf_counter() - started < 0.6  # not 5 x 0.2 s
    assert len(result.retrieved) == 5


async def test_failing_components_are_skipped_and_reported() -> None:
    broken = Broken()
    result = await pipeline(
        sources=[Numbers("a", [1, 2, 3, 4]), broken],
        hydrators=[Tagger(), broken],
        filters=[broken, DropOdd()],
        scorers=[broken, ById()],
    ).run(Q(user="v"))
    assert [c.id for c in result.retrieved] == [1, 2, 3, 4]
    assert [c.id for c in result.selected] == [4, 2]
    assert set(result.errors) == {"broken"}
    assert "backend down" in result.errors["broken"]


async def test_a_broken_selector_keeps_the_candidates() -> None:
    result = await pipeline(selector=Broken(), filters=[]).run(Q(user="v"))
    assert len(result.selected) == 6 and "broken" in result.errors


async def test_wrong_counts_are_rejected() -> None:
    result = await pipeline(hydrators=[Tagger(), ShortTagger()],
                            scorers=[ById(), TooMany()]).run(Q(user="v"))
    assert all(c.tag != "WRONG" for c in result.retrieved)
    assert [(c.id, c.score) for c in result.selected] == [(6, 16.0), (4, 14.0)]
    assert "returned 5 results for 6" in result.errors["short_tagger"]
    assert "returned 4 results for 3" in result.errors["too_many"]  # after the filter


async def test_a_filter_that_loses_candidates_is_rejected() -> None:
    result = await pipeline(filters=[LossyFilter(), DropOdd()]).run(Q(user="v"))
    assert "lossy" in result.errors
    assert [c.id for c in result.selected] == [6, 4]


async def test_component_timeout() -> None:
    result = await pipeline(sources=[Numbers("fast", [2]), Numbers("stuck", [4], delay=5)],
                            component_timeout_s=0.1).run(Q(user="v"))
    assert [c.id for c in result.selected] == [2]
    assert "timed out" in result.errors["stuck"]


async def test_side_effects_never_delay_the_response_and_are_awaited_at_close() -> None:
    slow = Slow()
    p = pipeline(side_effects=[slow, Exploding()])
    result = await asyncio.wait_for(p.run(Q(user="v")), 1.0)  # slow is still blocked
    assert [c.id for c in result.selected] == [6, 4]
    assert slow.done == [] and p.pending_side_effects >= 1
    slow.release.set()
    await p.aclose()
    assert slow.done == [6, 4]
    assert p.pending_side_effects == 0


async def test_close_cancels_side_effects_that_never_finish() -> None:
    slow = Slow()
    p = pipeline(side_effects=[slow])
    await p.run(Q(user="v"))
    await p.aclose(timeout_s=0.05)
    assert p.pending_side_effects == 0 and slow.done == []
