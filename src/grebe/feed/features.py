"""Candidate features (labels, scores, embedding) kept in memory for ranking.

A home request hydrates ~1,500 candidates; one annotation-store read per candidate is
seconds on SQLite and a network round trip each on Redis or PostgreSQL, far past a
50 ms budget. Popular posts are candidates of many viewers, so each post's features
are read once and kept, with the embedding as a float32 array the scorer can stack.

Freshness: writes that go through the feed's `IndexingStore` drop the post's entry at
once (the next read sees them); writes around it are seen after `ttl_s`. At most
`size` posts are kept, the oldest read dropped first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from grebe.feed.components import Patch
from grebe.feed.indexing import embedding_of
from grebe.stores.base import AnnotationStore
from grebe.types import Annotation

#: The candidate attributes a post's features fill (the keys of `features_of`).
FEATURES = ("labels", "scores", "embedding")


def features_of(annotations: Sequence[Annotation], producer: str | None,
                numbers: Mapping[str, tuple[str, float]] | None = None) -> Patch:
    """Labels (union), scores (newest wins) and embedding of one post's annotations, and
    for each of `numbers` (attribute -> (score key, default)) that score as a float."""
    labels: list[str] = []
    scores: dict[str, float] = {}
    for annotation in sorted(annotations, key=lambda a: a.updated_at):
        labels.extend(label for label in annotation.labels if label not in labels)
        scores.update(annotation.scores)
    vector = embedding_of(annotations, producer)
    features: dict[str, Any] = {
        "labels": labels,
        "scores": scores,
        "embedding": np.asarray(vector, dtype=np.float32) if vector is not None else None,
    }
    for name, (key, default) in (numbers or {}).items():
        features[name] = float(scores.get(key, default))
    return features


class FeatureCache:
    """Features by post id, each kept `ttl_s` from when it was read, at most `size`.

    Entries are kept in the order they were read (a re-read moves to the end), so the
    expired ones are always the oldest: a lookup expires that prefix once and then
    finds every post with one `dict.get` in C (`map`), with no read-time check per post
    (1,500 per request)."""

    def __init__(
        self, store: AnnotationStore, producer: str | None, *, size: int, ttl_s: float,
        concurrency: int, clock: Callable[[], float] = time.monotonic,
        numbers: Mapping[str, tuple[str, float]] | None = None,
    ) -> None:
        self.store = store
        self.producer = producer
        #: Scores kept as floats besides the dict: attribute -> (score key, default).
        self.numbers = dict(numbers or {})
        self.size = size
        self.ttl_s = ttl_s
        self.clock = clock
        self._limit = asyncio.Semaphore(concurrency)
        self._features: dict[str, Patch] = {}  # post id -> features
        self._read_at: dict[str, float] = {}  # post id -> when read, oldest first
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._features)

    def invalidate(self, post_ids: Iterable[str]) -> None:
        for post_id in post_ids:
            self._features.pop(post_id, None)
            self._read_at.pop(post_id, None)

    def _drop_oldest(self) -> None:
        oldest = next(iter(self._read_at))
        del self._read_at[oldest]
        del self._features[oldest]

    def _expire(self) -> None:
        read_at, cutoff = self._read_at, self.clock() - self.ttl_s
        while read_at and read_at[next(iter(read_at))] < cutoff:
            self._drop_oldest()

    async def _read(self, post_id: str) -> Patch:
        async with self._limit:
            annotations = await self.store.get(post_id)
        features = features_of(annotations, self.producer, self.numbers)
        if self.size:
            self._read_at.pop(post_id, None)  # to the newest end
            self._read_at[post_id] = self.clock()
            self._features[post_id] = features
            if len(self._features) > self.size:
                self._drop_oldest()
        return features

    async def get_many(self, post_ids: Sequence[str]) -> list[Patch]:
        """Features of each post, in order; misses read concurrently from the store."""
        self._expire()
        out: list[Patch | None] = list(map(self._features.get, post_ids))
        missing: dict[str, list[int]] = {}
        if None in out:
            for i, features in enumerate(out):
                if features is None:
                    missing.setdefault(post_ids[i], []).append(i)
        self.hits += len(post_ids) - len(missing)
        self.misses += len(missing)
        if missing:
            read = await asyncio.gather(*(self._read(pid) for pid in missing))
            for slots, features in zip(missing.values(), read, strict=True):
                for i in slots:
                    out[i] = features
        return out  # type: ignore[return-value]
