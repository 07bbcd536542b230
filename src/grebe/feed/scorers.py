"""Scorers of the home timeline: a weighted sum, then author diversity."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from grebe.feed.candidates import FeedCandidate, HomeQuery
from grebe.feed.pipeline import Patch
from grebe.feed.settings import FeedSettings

SIGNALS = ("interest", "recency", "quality", "engagement", "in_network")


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
    matches posts of either. The raw signals are kept in `signals`; the contributions
    (`score_parts`) are derived for served posts only (`contributions`). Computed for
    all candidates at once, as 1,500 candidates must rank in milliseconds."""

    name = "weighted"

    def __init__(self, settings: FeedSettings) -> None:
        self.settings = settings

    def interest(self, query: HomeQuery, candidates: Sequence[FeedCandidate]) -> np.ndarray:
        known = np.array([c.similarity or 0.0 for c in candidates], dtype=np.float32)
        vectors = query.interest_vectors or (
            [query.interest_vector] if query.interest_vector is not None else [])
        if not vectors or not candidates:
            return np.clip(known, 0.0, 1.0)
        interests = np.asarray(vectors, dtype=np.float32)
        dim = interests.shape[1]
        rows = [i for i, c in enumerate(candidates)
                if c.embedding is not None and len(c.embedding) == dim]
        if rows:
            matrix = np.stack([np.asarray(candidates[i].embedding, dtype=np.float32)
                               for i in rows])
            norms = np.linalg.norm(matrix, axis=1)
            best = (matrix @ interests.T).max(axis=1) / np.where(norms > 0, norms, 1.0)
            known[rows] = np.where(norms > 0, best, 0.0)
        return np.clip(known, 0.0, 1.0)

    async def score(self, query: HomeQuery, candidates: Sequence[FeedCandidate]
                    ) -> Sequence[Patch]:
        s, w = self.settings, self.settings.weights
        if not candidates:
            return []
        quality_key, engagement_key = s.quality_score_key, s.engagement_score_key
        default_quality = s.quality_default
        ages = np.maximum(0.0, query.now - np.array([c.created_at for c in candidates]))
        signals = np.stack([
            self.interest(query, candidates).astype(np.float64),
            np.power(0.5, ages / s.recency_half_life_s),
            np.array([c.scores.get(quality_key, default_quality) for c in candidates],
                     dtype=np.float64),
            np.array([c.scores.get(engagement_key, 0.0) for c in candidates],
                     dtype=np.float64),
            np.array([c.in_network for c in candidates], dtype=np.float64),
        ], axis=1)
        totals = signals @ np.array([getattr(w, name) for name in SIGNALS])
        return [
            {"score": total, "similarity": row[0], "signals": dict(zip(SIGNALS, row, strict=True))}
            for total, row in zip(totals.tolist(), signals.tolist(), strict=True)
        ]


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
                    ) -> Sequence[Patch]:
        decay, floor = self.settings.author_diversity_decay, self.settings.author_diversity_floor
        order = sorted(range(len(candidates)), key=lambda i: -candidates[i].score)
        counts: dict[str, int] = {}
        factors = [1.0] * len(candidates)
        for i in order:
            author = candidates[i].author_id
            n = counts.get(author, 0)
            counts[author] = n + 1
            factors[i] = max(floor, decay**n)
        return [{"score": c.score * f, "diversity": f}
                for c, f in zip(candidates, factors, strict=True)]
