"""Scorers of the home timeline: a weighted sum, then author diversity."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from grebe.feed.candidates import FeedCandidate, HomeQuery
from grebe.feed.pipeline import Patch
from grebe.feed.settings import FeedSettings


class WeightedScorer:
    """score = w_recency * 0.5**(age / half_life) + w_quality * quality
             + w_similarity * cosine(post, interests) + w_in_network * in_network.

    Quality is the annotation score named `quality_score_key` (0 when absent). The
    similarity is computed from the post's embedding when it has one, else the one the
    source measured, else 0."""

    name = "weighted"

    def __init__(self, settings: FeedSettings) -> None:
        self.settings = settings

    async def score(self, query: HomeQuery, candidates: Sequence[FeedCandidate]
                    ) -> Sequence[Patch]:
        s, w = self.settings, self.settings.weights
        interest = (np.asarray(query.interest_vector, dtype=np.float32)
                    if query.interest_vector is not None else None)
        patches = []
        for c in candidates:
            age = max(0.0, query.now - c.created_at)
            similarity = c.similarity or 0.0
            if interest is not None and c.embedding is not None \
                    and len(c.embedding) == len(interest):
                vector = np.asarray(c.embedding, dtype=np.float32)
                norm = float(np.linalg.norm(vector))
                similarity = float(vector @ interest) / norm if norm else 0.0
            parts = {
                "recency": math.pow(0.5, age / s.recency_half_life_s),
                "quality": float(c.scores.get(s.quality_score_key, 0.0)),
                "similarity": similarity,
                "in_network": 1.0 if c.in_network else 0.0,
            }
            total = (w.recency * parts["recency"] + w.quality * parts["quality"]
                     + w.similarity * parts["similarity"] + w.in_network * parts["in_network"])
            patches.append({"score": total, "score_parts": parts, "similarity": similarity})
        return patches


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
        return [
            {"score": c.score * f, "score_parts": {**c.score_parts, "author_diversity": f}}
            for c, f in zip(candidates, factors, strict=True)
        ]
