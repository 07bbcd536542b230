"""The home timeline: grebe's annotations and thunder's posts, ranked for one viewer.

    viewer + interests -> thunder (in-network) + nearest neighbours (out-of-network)
    -> annotations -> duplicate / seen / muted / safety filters
    -> weighted score (interest, recency, quality, engagement, in-network), author
       diversity -> top K -> drop posts deleted meanwhile -> explanation per post
    -> remember what was served (side effect; seen for `seen_window_s`)

When the viewer has seen the close out-of-network posts, less similar ones fill the
page (`similar_posts_backfill`), so the feed does not run dry (docs/serving.md).

`build_home_pipeline(config, store, thunder_store, embedder)` wires it all; flows
should write annotations through `HomeFeed.annotations` (or call `index_posts`) so
new embeddings reach the out-of-network index.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from grebe.config import GrebeConfig
from grebe.feed.ann import PostANNIndex
from grebe.feed.candidates import FeedCandidate, HomeQuery
from grebe.feed.components import PipelineResult, ScoreSelector
from grebe.feed.features import FeatureCache
from grebe.feed.filters import (
    DuplicateFilter,
    GoneFilter,
    MutedAuthorFilter,
    SafetyFilter,
    SeenFilter,
)
from grebe.feed.hydrators import AnnotationHydrator, AuthoredPosts, InterestHydrator, ViewerHydrator
from grebe.feed.indexing import IndexingStore, backfill
from grebe.feed.pipeline import CandidatePipeline, PipelineMetrics
from grebe.feed.scorers import (
    SIGNALS,
    AuthorDiversityScorer,
    WeightedScorer,
    contributions,
    score_columns,
)
from grebe.feed.settings import FeedSettings
from grebe.feed.sources import InNetworkSource, SimilarPostsSource
from grebe.feed.viewers import MemoryViewerDirectory, ViewerDirectory
from grebe.inference.base import Embedder
from grebe.stores.base import AnnotationStore
from grebe.thunder.client import InNetworkPostsClient, LocalThunderClient
from grebe.thunder.store import ThunderStore

HomeResult = PipelineResult[HomeQuery, FeedCandidate]


class TopKSelector(ScoreSelector[HomeQuery, FeedCandidate]):
    """The `max_results` best scores; ties go to the newer post, then the post id."""

    name = "top_k"

    def tiebreak(self, candidate: FeedCandidate) -> tuple[float, str]:
        return -candidate.created_at, candidate.post_id

    def size(self, query: HomeQuery) -> int:
        return query.max_results


def explain(candidate: FeedCandidate, filters_run: list[str]) -> dict[str, object]:
    """Why a served post is here: where it came from, the filters it passed, each
    signal's value and contribution, the author-diversity factor and the final score."""
    return explain_page([candidate], filters_run)[0]


def explain_page(served: Sequence[FeedCandidate], filters_run: list[str]
                 ) -> list[dict[str, object]]:
    """`explain` for each served post, its numbers rounded to 6 places in one numpy
    pass for the page: Python's `round` per number cost ~0.2 ms of a 50-post page
    (12 numbers a post), numpy's 0.01 (one-off). numpy rounds the value times 10**6,
    so in a rare half-way case it may differ from Python's correctly rounded value in
    the 6th place; none of 1,000,000 random numbers in 0..1 did."""
    parts = [dict(c.score_parts) for c in served]
    flat: list[float] = []
    for candidate, part in zip(served, parts, strict=True):
        diversity = part.pop("author_diversity", 1.0)
        flat += candidate.signals.values()
        flat += part.values()
        flat += (diversity, candidate.score)
    rounded = np.round(np.array(flat, dtype=np.float64), 6).tolist()
    out: list[dict[str, object]] = []
    at = 0
    for candidate, part in zip(served, parts, strict=True):
        signals = candidate.signals
        n, m = len(signals), len(part)
        out.append({
            "source": candidate.source,
            "in_network": candidate.in_network,
            "filters_passed": list(filters_run),
            "signals": dict(zip(signals, rounded[at : at + n], strict=True)),
            "contributions": dict(zip(part, rounded[at + n : at + n + m], strict=True)),
            "author_diversity": rounded[at + n + m],
            "score": rounded[at + n + m + 1],
        })
        at += n + m + 2
    return out


def explain_ranked(served: Sequence[FeedCandidate], filters_run: list[str],
                   signals: np.ndarray, weights: np.ndarray) -> None:
    """Fill each served post's `signals`, `score_parts` and `explanation` from the
    ranker's SIGNALS matrix of the page in one numpy pass: what each row's signals
    dict, `contributions` and `explain_page` give one after the other (each signal times its
    weight is the same float64 product), without a dict per post built only to be
    read back, flattened and re-split (three passes over the page were ~4% of a
    returning request's CPU, docs/benchmarks.md "One pass per page")."""
    n, m = signals.shape
    diversity = np.fromiter((c.diversity for c in served), dtype=np.float64, count=n)
    score = np.fromiter((c.score for c in served), dtype=np.float64, count=n)
    parts = signals * weights
    rounded = np.round(np.hstack([signals, parts, diversity[:, None], score[:, None]]),
                       6).tolist()
    for candidate, raw, part, r in zip(served, signals.tolist(), parts.tolist(), rounded,
                                       strict=True):
        candidate.signals = dict(zip(SIGNALS, raw, strict=True))
        candidate.score_parts = dict(zip(SIGNALS, part, strict=True))
        candidate.score_parts["author_diversity"] = candidate.diversity
        candidate.explanation = {
            "source": candidate.source,
            "in_network": candidate.in_network,
            "filters_passed": list(filters_run),
            "signals": dict(zip(SIGNALS, r[:m], strict=True)),
            "contributions": dict(zip(SIGNALS, r[m : 2 * m], strict=True)),
            "author_diversity": r[2 * m],
            "score": r[2 * m + 1],
        }


class RecordServed:
    """Remember what was served so the next request does not repeat it."""

    name = "record_served"

    def __init__(self, viewers: ViewerDirectory) -> None:
        self.viewers = viewers

    async def run(self, query: HomeQuery, result: HomeResult) -> None:
        await self.viewers.record_served(query.user_id, [c.post_id for c in result.selected])


class HomeFeed:
    """The assembled home timeline and the pieces a caller may need to feed it."""

    def __init__(
        self, pipeline: CandidatePipeline[HomeQuery, FeedCandidate], settings: FeedSettings,
        index: PostANNIndex, annotations: IndexingStore, viewers: ViewerDirectory,
        thunder: InNetworkPostsClient,
    ) -> None:
        self.pipeline = pipeline
        self.settings = settings
        self.index = index
        self.annotations = annotations
        self.viewers = viewers
        self.thunder = thunder
        self.features: FeatureCache | None = None  # candidate features kept in memory
        #: The ranker, which explains the served posts' signals after selection.
        self.weighted = next((s for s in pipeline.scorers if isinstance(s, WeightedScorer)),
                             None)
        #: The out-of-network source, whose searches feed-serve's workers share.
        self.similar = next((s for s in pipeline.sources if isinstance(s, SimilarPostsSource)),
                            None)

    async def home(self, user_id: str, *, max_results: int | None = None,
                   safety_level: str | None = None, **query: Any) -> HomeResult:
        """The timeline of `user_id`. Extra keyword arguments (following, muted, seen,
        engaged, interests) add to what the viewer directory knows."""
        if safety_level is not None:
            self.settings.blocked_labels(safety_level)  # ConfigError for unknown levels
        result = await self.pipeline.run(HomeQuery(
            user_id=user_id, max_results=max_results or self.settings.max_results,
            safety_level=safety_level, **query,
        ))
        weighted = self.weighted
        if weighted is not None and weighted.name in result.timings \
                and weighted.name not in result.errors:
            if result.selected:
                explain_ranked(result.selected, result.filters_run,
                               weighted.served_signals(result.query, result.selected),
                               weighted.weights())
            return result
        for candidate in result.selected:  # ranked without the weighted scorer
            candidate.score_parts = contributions(candidate, self.settings)
        for candidate, why in zip(result.selected,
                                  explain_page(result.selected, result.filters_run),
                                  strict=True):
            candidate.explanation = why
        return result

    async def index_posts(self, post_ids: Iterable[str]) -> int:
        """Index stored embeddings of these posts (after a restart, or when annotations
        were written around `annotations`)."""
        return await backfill(self.index, self.annotations.store, post_ids,
                              self.settings.embedding_producer)

    async def start(self) -> None:
        await self.thunder.start()

    async def aclose(self) -> None:
        await self.pipeline.aclose()
        await self.thunder.stop()


def build_home_pipeline(
    config: GrebeConfig | FeedSettings | None,
    store: AnnotationStore,
    thunder_store: ThunderStore,
    embedder: Embedder | None,
    *,
    viewers: ViewerDirectory | None = None,
    index: PostANNIndex | None = None,
    thunder: InNetworkPostsClient | None = None,
    dim: int | None = None,
    metrics: PipelineMetrics | None = None,
) -> HomeFeed:
    """Wire the home timeline.

    `thunder_store` is the in-process store: in-network posts come from it unless a
    `thunder` client (e.g. GrpcThunderClient) is given; out-of-network posts are looked
    up in it (so deleted and expired posts never surface). The ANN index dimension is
    the embedder's, or `dim` when there is no embedder."""
    settings = config.feed if isinstance(config, GrebeConfig) else config or FeedSettings()
    viewers = viewers if viewers is not None else MemoryViewerDirectory()
    if index is None:
        size = dim or (embedder.dim if embedder is not None else None)
        if size is None:
            raise ValueError("build_home_pipeline needs an embedder or dim for the ANN index")
        index = PostANNIndex(size)
    thunder = thunder or LocalThunderClient(thunder_store)
    features = FeatureCache(
        store, settings.embedding_producer, size=settings.feature_cache_posts,
        ttl_s=settings.feature_cache_ttl_s, concurrency=settings.annotation_concurrency,
        numbers=score_columns(settings))
    annotations = IndexingStore(store, index, settings.embedding_producer,
                                on_write=features.invalidate)
    pipeline: CandidatePipeline[HomeQuery, FeedCandidate] = CandidatePipeline(
        query_hydrators=[
            ViewerHydrator(viewers),
            InterestHydrator(viewers, store, embedder, AuthoredPosts(thunder_store), settings,
                             features),
        ],
        sources=[InNetworkSource(thunder, settings),
                 SimilarPostsSource(index, thunder_store, settings)],
        hydrators=[AnnotationHydrator(features)],
        filters=[DuplicateFilter(), SeenFilter(), MutedAuthorFilter(),
                 SafetyFilter(settings, features.label_sets)],
        scorers=[WeightedScorer(settings), AuthorDiversityScorer(settings)],
        selector=TopKSelector(),
        post_selection_filters=[GoneFilter(thunder_store)],
        side_effects=[RecordServed(viewers)],
        component_timeout_s=settings.component_timeout_s,
        metrics=metrics,
    )
    home = HomeFeed(pipeline, settings, index, annotations, viewers, thunder)
    home.features = features
    return home
