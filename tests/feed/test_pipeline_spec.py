"""Candidate-pipeline items of the specification (issue 13): per-component enable(query),
request-id logging, per-component timings and metrics, the selector's score/sort/size
split with NaN scores."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from grebe.feed.components import ScoreSelector
from grebe.feed.pipeline import CandidatePipeline, PipelineMetrics


class Q(msgspec.Struct, kw_only=True):
    user: str
    request_id: str = "req-1"
    video_only: bool = False


class Item(msgspec.Struct, kw_only=True):
    id: int
    score: float = 0.0
    video: bool = False


class Items:
    def __init__(self, name: str, items: Sequence[Item], *, videos: bool = False) -> None:
        self.name, self.items, self.videos = name, items, videos
        self.calls = 0

    def enable(self, query: Q) -> bool:
        return self.videos == query.video_only

    async def fetch(self, query: Q) -> list[Item]:
        self.calls += 1
        return [msgspec.structs.replace(i) for i in self.items]


class Fails:
    name = "fails"

    async def fetch(self, query: Q) -> list[Item]:
        raise RuntimeError("backend down")


class ByScore(ScoreSelector[Q, Item]):
    name = "by_score"

    def tiebreak(self, candidate: Item) -> Any:
        return candidate.id

    def size(self, query: Q) -> int | None:
        return 3


class Given:
    """Scores read from a table (NaN for one)."""

    name = "given"

    def __init__(self, scores: dict[int, float]) -> None:
        self.scores = scores

    async def score(self, query: Q, candidates: Sequence[Item]) -> list[dict[str, Any]]:
        return [{"score": self.scores.get(c.id, 0.0)} for c in candidates]


async def test_enable_decides_per_query_which_components_run() -> None:
    posts = Items("posts", [Item(id=1), Item(id=2)])
    videos = Items("videos", [Item(id=9, video=True)], videos=True)
    metrics = PipelineMetrics()
    pipeline = CandidatePipeline(sources=[posts, videos], selector=ByScore(), metrics=metrics)
    plain = await pipeline.run(Q(user="u"))
    assert [i.id for i in plain.retrieved] == [1, 2] and videos.calls == 0
    assert plain.errors == {} and "videos" not in plain.timings
    video = await pipeline.run(Q(user="u", video_only=True))
    assert [i.id for i in video.retrieved] == [9] and posts.calls == 1
    assert metrics.registry.get_sample_value(
        "grebe_feed_component_disabled_total", {"stage": "source", "component": "videos"}) == 1


async def test_request_id_in_logs_and_per_component_metrics(caplog: pytest.LogCaptureFixture
                                                            ) -> None:
    metrics = PipelineMetrics()
    pipeline = CandidatePipeline(
        sources=[Items("posts", [Item(id=1)]), Fails()], selector=ByScore(), metrics=metrics)
    with caplog.at_level(logging.WARNING, logger="grebe.feed.pipeline"):
        result = await pipeline.run(Q(user="u", request_id="req-42"))
    assert "fails" in result.errors
    assert set(result.timings) >= {"posts", "fails", "by_score"}
    assert any("[req-42]" in r.getMessage() and "fails" in r.getMessage()
               for r in caplog.records)
    sample = metrics.registry.get_sample_value
    assert sample("grebe_feed_component_errors_total",
                  {"stage": "source", "component": "fails"}) == 1
    assert sample("grebe_feed_component_seconds_count",
                  {"stage": "source", "component": "posts"}) == 1
    assert sample("grebe_feed_source_candidates_sum", {"component": "posts"}) == 1


async def test_selector_sorts_by_score_truncates_to_size_and_puts_nan_last() -> None:
    items = [Item(id=i) for i in range(5)]
    scores = {0: 0.5, 1: math.nan, 2: 0.9, 3: 0.5, 4: 0.1}
    selector = ByScore()
    pipeline = CandidatePipeline(sources=[Items("posts", items)], selector=selector,
                                 scorers=[Given(scores)])
    result = await pipeline.run(Q(user="u"))
    assert [i.id for i in result.selected] == [2, 0, 3]
    assert selector.nan_scores == 1
    # sort alone keeps everything; NaN goes last, not wherever the sort left it.
    ranked = selector.sort([Item(id=1, score=math.nan), Item(id=2, score=0.3),
                            Item(id=3, score=0.7)])
    assert [i.id for i in ranked] == [3, 2, 1]
