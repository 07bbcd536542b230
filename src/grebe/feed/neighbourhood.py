"""A viewer's out-of-network neighbourhood: the posts the interest searches found, kept
as columns so that a returning viewer's request picks from it without searching.

The searches (usearch HNSW, a few per request) and merging their ~600 answers were the
largest part of a home request's CPU (docs/benchmarks.md, "Where a request's CPU
goes"). A viewer's interests change when they engage or post, not between two
refreshes, so the merged answer is kept per viewer and interest for a short window
(`feed.neighbourhood_cache_s`). What does change between requests is checked every
time, on the kept columns, with lookups mapped in C: posts the viewer has seen or
engaged with since, authors they follow now, posts deleted or expired meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Sequence
from itertools import chain
from operator import is_, itemgetter
from typing import Protocol

import numpy as np
from cachetools import TTLCache

from grebe import constants as C
from grebe.thunder.store import LightPost


class PostLookup(Protocol):
    """Recent posts by id (a ThunderStore is one): deleted or expired ones are absent."""

    def get(self, post_id: str) -> LightPost | None: ...


class Neighbourhood:
    """Posts found near a viewer's interests, each once at its best similarity, most
    similar first (equal similarities in id order), down to a similarity floor, with
    their columns (grebe.feed.sources.post_columns); `more` says whether the index
    may hold further posts (a search came back full)."""

    __slots__ = ("columns", "filled", "ids", "more", "posts", "similarity")

    def __init__(self, found: Iterable[Iterable[tuple[str, float]]],
                 get: Callable[[str], LightPost | None], floor: float, more: bool,
                 columns_of: Callable[[Sequence[LightPost]], dict[str, np.ndarray]]) -> None:
        # Best similarity per post: in ascending order of similarity, the dict keeps
        # each id's last (best) value; then by similarity, equal ones in id order.
        # Sorts and dicts in C, no Python loop over the answers.
        best = dict(sorted(chain.from_iterable(found), key=_SIMILARITY))
        ranked = sorted(best.items())
        ranked.sort(key=_SIMILARITY, reverse=True)
        similarity = np.fromiter(map(_SIMILARITY, ranked), dtype=np.float64,
                                 count=len(ranked))
        ranked = ranked[: int(np.count_nonzero(similarity >= floor))]
        held = list(map(get, map(_ID, ranked)))
        alive = [i for i, post in enumerate(held) if post is not None]
        self.posts: list[LightPost] = [held[i] for i in alive]  # type: ignore[misc]
        self.ids: list[str] = [post.post_id for post in self.posts]
        self.similarity = similarity[alive] if len(alive) else np.empty(0)
        self.columns = columns_of(self.posts)
        self.more = more
        #: How many posts the first request given this neighbourhood took from it.
        self.filled = 0

    def stale(self, picked: int, k: int) -> bool:
        """Whether to search again rather than serve `picked` of k posts: the viewer has
        used up more than a quarter (NEIGHBOURHOOD_REFILL) of what the search gave,
        and the index may hold more."""
        return picked < k and self.more and picked < self.filled * C.FEED_NEIGHBOURHOOD_REFILL

    def __len__(self) -> int:
        return len(self.ids)

    def pick(self, k: int, *, get: Callable[[str], LightPost | None],
             exclude: Sequence[Container[str]], authors: Container[str]) -> np.ndarray:
        """Positions of the first k posts not in any of `exclude`, not by `authors` and
        still what `get` holds (the same object: not deleted, expired or replaced)."""
        n = len(self.ids)
        drop = np.fromiter(map(is_, map(get, self.ids), self.posts), dtype=bool,
                           count=n)
        np.logical_not(drop, out=drop)
        for ids in exclude:
            if ids:
                drop |= np.fromiter(map(ids.__contains__, self.ids), dtype=bool, count=n)
        drop |= np.fromiter(map(authors.__contains__, self.columns["author_id"]),
                            dtype=bool, count=n)
        return np.flatnonzero(~drop)[:k]


class Adopted:
    """A neighbourhood another feed-serve worker's search found (grebe.feed.replication),
    kept as it came (post ids, similarities, `more`, `filled`) until this worker first
    serves the viewer, when `hood` is built from it. A viewer's keep-alive connection
    stays on one worker, so most neighbourhoods a peer sends are never served here,
    and building each on arrival (a lookup per post, its columns) cost every worker
    ~2% of its CPU under bench/feed_http.py (docs/benchmarks.md, "Fewer objects per
    request")."""

    __slots__ = ("filled", "hood", "more", "post_ids", "similarity")

    def __init__(self, post_ids: Sequence[str], similarity: Sequence[float], more: bool,
                 filled: int) -> None:
        self.post_ids = post_ids
        self.similarity = similarity
        self.more = more
        self.filled = filled
        self.hood: Neighbourhood | None = None


#: A neighbourhood's viewer and interest queries (their float32 bytes).
NeighbourhoodKey = tuple[str, bytes]


class NeighbourhoodCache:
    """Neighbourhoods by (viewer, interest queries), each kept `ttl_s`, at most `size`
    (least recently used dropped first); `ttl_s` 0 keeps nothing. A neighbourhood
    another worker found is kept `Adopted` until it is first served."""

    def __init__(self, ttl_s: float, size: int, clock: Callable[[], float]) -> None:
        self.ttl_s = ttl_s
        self._cache: TTLCache[NeighbourhoodKey, Neighbourhood | Adopted] | None = \
            TTLCache(maxsize=size, ttl=ttl_s, timer=clock) if ttl_s > 0 else None
        self.hits = 0
        self.misses = 0

    def get(self, key: NeighbourhoodKey) -> Neighbourhood | Adopted | None:
        found = self._cache.get(key) if self._cache is not None else None
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
        return found

    def put(self, key: NeighbourhoodKey, hood: Neighbourhood | Adopted) -> None:
        if self._cache is not None:
            self._cache[key] = hood

    def clear(self) -> None:
        """Forget every neighbourhood (bench/feed_components.py times a search so)."""
        if self._cache is not None:
            self._cache.clear()


_ID = itemgetter(0)
_SIMILARITY = itemgetter(1)
