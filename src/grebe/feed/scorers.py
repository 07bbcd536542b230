"""Scorers of the home timeline: a weighted sum, then author diversity."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import count
from typing import Any

import numpy as np

from grebe.feed import blas
from grebe.feed.candidates import FeedCandidate, HomeQuery
from grebe.feed.components import Columns
from grebe.feed.frame import CandidateFrame, column, numbers
from grebe.feed.settings import FeedSettings

SIGNALS = ("interest", "recency", "quality", "engagement", "in_network")


def _similarities(candidates: Sequence[FeedCandidate]) -> np.ndarray:
    """The similarity each source measured, 0 where none (NaN in a frame's column)."""
    values = column(candidates, "similarity")
    if isinstance(values, np.ndarray) and values.dtype != object:
        return np.nan_to_num(values.astype(np.float64), nan=0.0)
    return np.fromiter((v or 0.0 for v in values), dtype=np.float64, count=len(values))


def score_columns(settings: FeedSettings) -> dict[str, tuple[str, float]]:
    """The scores the ranker reads as floats (candidate attribute -> (annotation score
    key, default)): what the feature cache keeps per post besides the scores dict."""
    return {"quality": (settings.quality_score_key, settings.quality_default),
            "engagement": (settings.engagement_score_key, 0.0)}


def _score(candidates: Sequence[FeedCandidate], name: str, key: str, default: float,
           n: int) -> np.ndarray:
    """One score of every candidate: a frame's float column when the hydrator gave one,
    else read from each candidate's scores dict (the definition)."""
    if isinstance(candidates, CandidateFrame) and candidates.has(name):
        return numbers(candidates, name)
    return np.array([sc.get(key, default) for sc in column(candidates, "scores")],
                    dtype=np.float64).reshape(n)


def _joined(embeddings: list[Any], dim: int) -> np.ndarray | None:
    """The embeddings as one float32 matrix when every one is a vector of `dim` values,
    else None. One concatenate: `np.stack` wraps each row in Python first (1,500 rows
    of 384: 0.46 ms here against 0.68, a micro-benchmark at load ~10)."""
    try:
        if len(set(map(len, embeddings))) != 1:
            return None
        flat = np.concatenate(embeddings)
    except (TypeError, ValueError):  # a candidate without an embedding (None)
        return None
    if flat.size != len(embeddings) * dim:
        return None
    return flat.reshape(len(embeddings), dim).astype(np.float32, copy=False)


def _best_cosine(matrix: np.ndarray, interests: np.ndarray) -> np.ndarray:
    """Each row's best cosine with the interest vectors (0 for a zero row). `@` on one
    BLAS thread when the process limited BLAS to one (grebe.feed.blas), else einsum:
    these products are too small for BLAS threads, which cost 5-20x the CPU of the
    product itself on a busy host (docs/benchmarks.md)."""
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))
    if blas.one_thread():
        products = matrix @ interests.T
    else:
        products = np.einsum("ij,kj->ik", matrix, interests)
    # The best of each row taken down the contiguous axis: numpy's max along a short
    # last axis (a few interests) is ~12x slower than along a long one (1,500 x 6:
    # 0.051 against 0.004 ms with the transposing copy, one-off); the same values.
    best = np.ascontiguousarray(products.T).max(axis=0)
    return np.where(norms > 0, best / np.where(norms > 0, norms, 1.0), 0.0)


class WeightedScorer:
    """score = sum over signals of weight x signal, each signal in 0..1:

      interest    the best cosine between the post's embedding and the viewer's interest
                  vectors (engaged, authored, stated), clipped at 0; without an
                  embedding, the similarity the source measured, else 0
      recency     0.5 ** (age / recency_half_life_s)
      quality     the annotation score `quality_score_key` (`quality_default` if absent)
      engagement  the annotation score `engagement_score_key` (0 if absent)
      in_network  1 for a followed author's post

    The best cosine rather than the cosine to the mean: a viewer with two interests
    matches posts of either. Computed for all candidates at once as arrays (one matrix
    product for interest), returned as columns, as 1,500 candidates must rank in
    milliseconds; the raw signals (`signals`) and contributions (`score_parts`) are
    derived for served posts only (`served_signals`; grebe.feed.home.explain_ranked)."""

    name = "weighted"

    def __init__(self, settings: FeedSettings) -> None:
        self.settings = settings

    def interest(self, query: HomeQuery, candidates: Sequence[FeedCandidate]) -> np.ndarray:
        """One matrix product: the candidates' embeddings against every interest vector."""
        known = _similarities(candidates)
        vectors = query.interest_vectors  # an array or a list (grebe.feed.candidates)
        if not len(vectors) and query.interest_vector is not None:
            vectors = [query.interest_vector]
        if not len(vectors) or not candidates:
            return np.clip(known, 0.0, 1.0)
        interests = np.asarray(vectors, dtype=np.float32)
        dim = interests.shape[1]
        given = column(candidates, "embedding")
        if isinstance(given, np.ndarray) and given.ndim == 2 and given.shape[1] == dim:
            # The feature table's matrix (grebe.feed.features): nothing to join.
            known[:] = _best_cosine(given.astype(np.float32, copy=False), interests)
            return np.clip(known, 0.0, 1.0)
        embeddings = list(given)
        matrix = _joined(embeddings, dim)
        if matrix is not None:  # the usual case: every candidate has an embedding
            known[:] = _best_cosine(matrix, interests)
            return np.clip(known, 0.0, 1.0)
        rows = [i for i, e in enumerate(embeddings) if e is not None and len(e) == dim]
        if rows:
            matrix = np.stack([embeddings[i] for i in rows]).astype(np.float32, copy=False)
            known[rows] = _best_cosine(matrix, interests)
        return np.clip(known, 0.0, 1.0)

    def signals(self, query: HomeQuery, candidates: Sequence[FeedCandidate],
                interest: np.ndarray) -> np.ndarray:
        """The candidates x SIGNALS matrix, each signal in 0..1."""
        s = self.settings
        quality_key, engagement_key = s.quality_score_key, s.engagement_score_key
        default_quality = s.quality_default
        n = len(candidates)
        ages = np.maximum(0.0, query.now - numbers(candidates, "created_at"))
        return np.stack([
            interest,
            np.power(0.5, ages / s.recency_half_life_s),
            _score(candidates, "quality", quality_key, default_quality, n),
            _score(candidates, "engagement", engagement_key, 0.0, n),
            numbers(candidates, "in_network"),
        ], axis=1)

    def weights(self) -> np.ndarray:
        w = self.settings.weights
        return np.array([getattr(w, name) for name in SIGNALS])

    async def score(self, query: HomeQuery, candidates: Sequence[FeedCandidate]
                    ) -> Columns:
        """Scores and the interest signal (as `similarity`), as columns: no per-candidate
        dicts; the per-signal values are derived for served posts only (`served_signals`)."""
        if not candidates:
            return Columns(score=[], similarity=[])
        interest = self.interest(query, candidates)
        totals = weighted_sum(self.signals(query, candidates, interest), self.weights())
        if isinstance(candidates, CandidateFrame):  # arrays stay arrays in a frame
            return Columns(score=totals, similarity=interest)
        return Columns(score=totals.tolist(), similarity=interest.tolist())

    def served_signals(self, query: HomeQuery, served: Sequence[FeedCandidate]) -> np.ndarray:
        """The served (scored) posts' SIGNALS matrix: the same as `score`'s, with the
        interest signal it stored in `similarity` (grebe.feed.home.explain_ranked turns
        it into each post's signals, contributions and explanation in one pass)."""
        interest = np.clip(np.array([c.similarity or 0.0 for c in served],
                                    dtype=np.float64), 0.0, 1.0)
        return self.signals(query, served, interest)


def weighted_sum(signals: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Each row's sum of signal x weight, column by column: numpy's sum along a short
    last axis (five signals) is several times slower than adding five columns, and
    adding in column order is the very sum it gives (it adds fewer than eight values
    one after the other)."""
    totals = signals[:, 0] * weights[0]
    for j in range(1, signals.shape[1]):
        totals += signals[:, j] * weights[j]
    return totals


def contributions(candidate: FeedCandidate, settings: FeedSettings) -> dict[str, float]:
    """Each signal's weight x value, and the author-diversity factor: the score's parts
    (filled for served posts only; ranking needs just the score)."""
    w = settings.weights
    parts = {name: getattr(w, name) * value for name, value in candidate.signals.items()}
    parts["author_diversity"] = candidate.diversity
    return parts


class AuthorDiversityScorer:
    """Attenuate repeated authors: in score order, an author's n-th post (from 0) is
    multiplied by decay**n, never below the floor, so one prolific account cannot fill
    the feed."""

    name = "author_diversity"

    def __init__(self, settings: FeedSettings) -> None:
        self.settings = settings

    async def score(self, query: HomeQuery, candidates: Sequence[FeedCandidate]
                    ) -> Columns:
        decay, floor = self.settings.author_diversity_decay, self.settings.author_diversity_floor
        n = len(candidates)
        scores = numbers(candidates, "score").copy()
        order = np.argsort(-scores, kind="stable")
        nth = np.empty(n)
        nth[order] = occurrence(author_codes(column(candidates, "author_id"), n)[order])
        factors = np.maximum(floor, np.power(decay, nth))
        if isinstance(candidates, CandidateFrame):
            return Columns(score=scores * factors, diversity=factors)
        return Columns(score=(scores * factors).tolist(), diversity=factors.tolist())


def author_codes(authors: Iterable[object], n: int) -> np.ndarray:
    """An integer per distinct author (the position of its first appearance): one
    `setdefault` per author mapped in C, so the ranking works on ints, not 1,500
    strings (one pass instead of three: 0.08 against 0.13 ms, a micro-benchmark)."""
    codes: dict[object, int] = {}
    return np.fromiter(map(codes.setdefault, authors, count()), dtype=np.intp, count=n)


def occurrence(codes: np.ndarray) -> np.ndarray:
    """For each position, how many earlier positions hold the same code (0 for the
    first): a stable sort groups equal codes in order, and a position's rank in its
    group is its distance from the group's start."""
    n = len(codes)
    if not n:
        return np.zeros(0)
    by = np.argsort(codes, kind="stable")
    grouped = codes[by]
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
    rank = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    out = np.empty(n)
    out[by] = rank
    return out
