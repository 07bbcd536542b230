"""Random thunder worlds for the out-of-network source tests: posts with random
vectors in an ANN index that counts its searches, and their creations in a thunder
store (one place, so every test builds its world the same way)."""

from __future__ import annotations

import random
import time

import numpy as np

from grebe.feed.ann import PostANNIndex
from grebe.thunder.events import PostCreate
from grebe.thunder.store import ThunderStore

DIM = 8


class CountingIndex(PostANNIndex):
    """Records each search call's shape and answer, to show how many the source makes."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.calls: list[tuple[int, int]] = []  # (query vectors, depth)
        self.found: list[list[tuple[str, float]]] = []  # every search's answer

    def search_many(self, vectors, k, exclude=()):  # type: ignore[no-untyped-def]
        self.calls.append((len(vectors), k))
        found = super().search_many(vectors, k, exclude)
        self.found += found
        return found


def random_world(
    seed: int, posts: int, authors: int, *, ties: tuple[slice, int] | None = None
) -> tuple[ThunderStore, CountingIndex, np.ndarray, list[str]]:
    """`posts` posts by `authors` random authors, one a second up to now; `ties` copies
    one post's vector over a slice of others (exact ties in similarity)."""
    rng = np.random.default_rng(seed)
    prng = random.Random(seed)
    store, index = ThunderStore(), CountingIndex(DIM)
    vectors = rng.normal(size=(posts, DIM)).astype(np.float32)
    if ties is not None:
        vectors[ties[0]] = vectors[ties[1]]
    width = len(str(posts - 1))
    ids = [f"p{i:0{width}d}" for i in range(posts)]
    now = time.time()
    for i, pid in enumerate(ids):
        store.apply(PostCreate(post_id=pid, author_id=f"u{prng.randrange(authors)}",
                               created_at=now - 5000 + i))
    index.add_many(ids, vectors)
    return store, index, vectors, ids
