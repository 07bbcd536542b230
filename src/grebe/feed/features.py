"""Candidate features (labels, scores, embedding) kept in memory for ranking.

A home request hydrates ~1,500 candidates; one annotation-store read per candidate is
seconds on SQLite and a network round trip each on Redis or PostgreSQL, far past a
50 ms budget. Popular posts are candidates of many viewers, so each post's features
are read once and kept.

They are kept as one table, a slot (row) per post: the embeddings in one float32
matrix, the ranked scores in float arrays, labels and scores dicts in object arrays.
Hydrating 1,500 candidates is then one id -> slot lookup mapped in C and one gather
per column (`columns`), and the ranker gets the embeddings as one matrix, where a dict
per post meant a Python comprehension per attribute and joining 1,500 arrays again
on every request (docs/benchmarks.md, "A feature table").

Ids are looked up by their string hashes in a numpy table (grebe.thunder.serving's
`SlotIndex`, as thunder finds authors), not one `dict.get` each: a request's ids are
often not the very string objects the table was filled with (a gRPC thunder answer's
are new strings every time; a retweet's source id), and then each `dict.get` also
reads the stored key string to compare, a third cold read per id (1,500 ids 0.46-0.62
ms against 0.25-0.29, one-off; docs/benchmarks.md, "Fewer objects per request").

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
from grebe.feed.labels import LabelSets
from grebe.stores.base import AnnotationStore
from grebe.thunder.serving import SlotIndex
from grebe.types import Annotation

#: The candidate attributes a post's features fill (the keys of `features_of`).
FEATURES = ("labels", "scores", "embedding")
#: The column `columns` adds for candidate frames: each post's label-set code
#: (grebe.feed.labels), which the safety filter reads instead of the labels lists.
LABEL_SET = "_label_set"
#: Rows the table starts with; it doubles as posts are read, up to the cache's size.
FIRST_CAPACITY = 1024


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

    Slots are kept in the order they were read (a re-read moves to the end), so the
    expired ones are always the oldest: a lookup expires that prefix once and then
    finds every post's slot with one `dict.get` in C (`map`), with no read-time check
    per post (1,500 per request). The embedding matrix takes the dimension of the
    first embedding read; a post whose embedding has another (a second embedder's) is
    kept beside it, and a request with such a post gets its embeddings as a column of
    arrays rather than a matrix."""

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
        self._slots: dict[str, int] = {}  # post id -> slot, oldest read first
        self._index = SlotIndex(self._slots)  # the same, looked up by hash in numpy
        self._free: list[int] = []  # slots given up (invalidated, dropped)
        self._capacity = 0
        self._read_at = np.empty(0)
        self._labels = np.empty(0, dtype=object)
        self._scores = np.empty(0, dtype=object)
        #: Codes of the posts' label sets, shared with the safety filter.
        self.label_sets = LabelSets()
        self._label_set = np.empty(0, dtype=np.int32)
        self._numbers = {name: np.empty(0) for name in self.numbers}
        self._embeddings: np.ndarray | None = None  # capacity x dim, float32
        self._embedded = np.empty(0, dtype=bool)  # slot has a row in _embeddings
        self._other: dict[int, np.ndarray] = {}  # slot -> embedding of another dimension
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._slots)

    def invalidate(self, post_ids: Iterable[str]) -> None:
        for post_id in post_ids:
            slot = self._slots.pop(post_id, None)
            if slot is not None:
                self._release(post_id, slot)

    def _release(self, post_id: str, slot: int) -> None:
        self._index.remove(post_id, slot)
        self._labels[slot] = self._scores[slot] = None
        self._other.pop(slot, None)
        self._free.append(slot)

    def _drop_oldest(self) -> None:
        oldest = next(iter(self._slots))
        self._release(oldest, self._slots.pop(oldest))

    def _expire(self) -> None:
        slots, read_at, cutoff = self._slots, self._read_at, self.clock() - self.ttl_s
        while slots and read_at[slots[next(iter(slots))]] < cutoff:
            self._drop_oldest()

    def _grow(self, dim: int | None) -> None:
        """Room for more slots: double the arrays (up to `size`), keeping the rows."""
        old, new = self._capacity, min(self.size, max(FIRST_CAPACITY, 2 * self._capacity))

        def grown(array: np.ndarray) -> np.ndarray:
            out = np.zeros((new, *array.shape[1:]), dtype=array.dtype)
            out[:old] = array[:old]
            return out

        self._read_at = grown(self._read_at)
        self._labels, self._scores = grown(self._labels), grown(self._scores)
        self._label_set = grown(self._label_set)
        self._numbers = {name: grown(column) for name, column in self._numbers.items()}
        self._embedded = grown(self._embedded)
        if self._embeddings is not None:
            self._embeddings = grown(self._embeddings)
        elif dim is not None:
            self._embeddings = np.zeros((new, dim), dtype=np.float32)
        self._free.extend(range(new - 1, old - 1, -1))  # lowest first (pop from the end)
        self._capacity = new

    def _keep(self, post_id: str, features: Patch) -> None:
        """Store a post's features in a slot (its own again when it had one), newest."""
        vector = features["embedding"]
        slot = self._slots.pop(post_id, None)
        if slot is None:
            if len(self._slots) >= self.size:
                self._drop_oldest()
            if not self._free:
                self._grow(len(vector) if vector is not None else None)
            slot = self._free.pop()
            self._index.add(post_id, slot)
        self._slots[post_id] = slot  # to the newest end
        self._read_at[slot] = self.clock()
        self._labels[slot] = features["labels"]
        self._scores[slot] = features["scores"]
        self._label_set[slot] = self.label_sets.code(features["labels"])
        for name, column in self._numbers.items():
            column[slot] = features[name]
        self._other.pop(slot, None)
        self._embedded[slot] = False
        if vector is not None:
            if self._embeddings is None:
                self._embeddings = np.zeros((self._capacity, len(vector)), dtype=np.float32)
            if len(vector) == self._embeddings.shape[1]:
                self._embeddings[slot] = vector
                self._embedded[slot] = True
            else:
                self._other[slot] = vector

    async def _read(self, post_id: str) -> Patch:
        async with self._limit:
            annotations = await self.store.get(post_id)
        features = features_of(annotations, self.producer, self.numbers)
        if self.size:
            self._keep(post_id, features)
        return features

    async def _lookup(self, post_ids: Sequence[str]) -> tuple[np.ndarray, dict[str, Patch]]:
        """Each post's slot, and the features read from the store for those without
        one (slot -1): read but not kept (`size` 0), or dropped again meanwhile by
        other reads (a cache smaller than a request, or other requests' reads while
        these were awaited). Slots are looked up again after every await, so the
        answer never holds a slot that was reused meanwhile."""
        self._expire()
        n = len(post_ids)
        read: dict[str, Patch] = {}
        first = True
        while True:
            slots = self._index.lookup(post_ids)
            missing = [pid for pid in dict.fromkeys(
                post_ids[i] for i in np.flatnonzero(slots < 0).tolist()) if pid not in read]
            if first:
                self.hits += n - len(missing)
                first = False
            if not missing:
                return slots, read
            self.misses += len(missing)
            read.update(zip(missing, await asyncio.gather(*(self._read(pid)
                                                            for pid in missing)),
                            strict=True))

    def _patch(self, slot: int) -> Patch:
        features: dict[str, Any] = {"labels": self._labels[slot],
                                    "scores": self._scores[slot],
                                    "embedding": self._embedding(slot)}
        for name, column in self._numbers.items():
            features[name] = float(column[slot])
        return features

    def _embedding(self, slot: int) -> np.ndarray | None:
        """A copy: the slot's row is reused once the post leaves the cache."""
        if self._embedded[slot]:
            assert self._embeddings is not None
            return self._embeddings[slot].copy()
        return self._other.get(slot)

    async def get_many(self, post_ids: Sequence[str]) -> list[Patch]:
        """Features of each post, in order (a dict each); misses read concurrently from
        the store. For a few posts; candidates are hydrated by `columns`."""
        slots, read = await self._lookup(post_ids)
        return [self._patch(slot) if slot >= 0 else read[pid]
                for pid, slot in zip(post_ids, slots.tolist(), strict=True)]

    async def columns(self, post_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """FEATURES, `numbers` and LABEL_SET of each post as columns, in order: one
        gather per column. `embedding` is an n x dim float32 matrix when every post has
        an embedding of one dimension, else an object column (an array or None per
        post)."""
        slots, read = await self._lookup(post_ids)
        n = len(slots)
        lost = np.flatnonzero(slots < 0).tolist()  # not in the table: from `read`
        kept = self.size > 0
        at = np.maximum(slots, 0)
        out: dict[str, np.ndarray] = {
            "labels": self._labels[at] if kept else np.empty(n, dtype=object),
            "scores": self._scores[at] if kept else np.empty(n, dtype=object)}
        for name, column in self._numbers.items():
            out[name] = column[at] if kept else np.zeros(n)
        for i in lost:
            features = read[post_ids[i]]
            for name in out:
                out[name][i] = features[name]
        codes = self._label_set[at] if kept else np.empty(n, dtype=np.int32)
        for i in lost:
            codes[i] = self.label_sets.code(read[post_ids[i]]["labels"])
        out[LABEL_SET] = codes
        out["embedding"] = self._embedding_column(slots, at, [read[post_ids[i]]["embedding"]
                                                              for i in lost], lost)
        return out

    def _embedding_column(self, slots: np.ndarray, at: np.ndarray,
                          lost_vectors: list[np.ndarray | None], lost: list[int]
                          ) -> np.ndarray:
        """The embeddings of these slots (and of the posts `lost`, given) as one
        matrix when they all have one of the same dimension, else an object column."""
        table = self._embeddings
        dims = {None if v is None else len(v) for v in lost_vectors}
        if table is not None:
            dims.add(table.shape[1])
        in_table = slots[slots >= 0]
        if len(dims) == 1 and None not in dims and (
                not len(in_table) or bool(self._embedded[in_table].all())):
            dim = dims.pop()
            assert dim is not None
            matrix = table[at] if table is not None else np.empty((len(slots), dim),
                                                                  dtype=np.float32)
            for i, vector in zip(lost, lost_vectors, strict=True):
                matrix[i] = vector
            return matrix
        vectors = iter(lost_vectors)
        return np.fromiter((self._embedding(slot) if slot >= 0 else next(vectors)
                            for slot in slots.tolist()), dtype=object, count=len(slots))
