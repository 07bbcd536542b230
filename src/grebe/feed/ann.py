"""An approximate-nearest-neighbour index of post embeddings (usearch HNSW, cosine).

usearch keys are integers; post ids are strings, so the index keeps a two-way map.
Re-adding a post replaces its vector. Searches and adds are C++ calls that finish in
microseconds to a millisecond at feed scale, so they run inline; `search` asks for a
few extra neighbours so that removed-but-not-yet-compacted keys and the viewer's own
exclusions still leave k results.

Vectors are held as int8 by default (usearch normalises each vector, then scales it to
±127): a search reads a quarter of the bytes of float32, and at feed scale a search is
reading cold memory, so a viewer's first request, which searches, costs ~2 ms less
(docs/benchmarks.md, "A cheaper first request"). A similarity is then within ~0.02 of
the float32 cosine; the ranker's interest signal is computed from the feature table's
float32 embeddings, not from it.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence

import numpy as np

# usearch's compiled module and onnxruntime's (the text embedder) crash the process
# (SIGSEGV at import) when onnxruntime is loaded second; loading it first is safe.
# Seen with usearch 2.26 / onnxruntime 1.31; drop this once they coexist.
import onnxruntime  # noqa: F401 - import order matters, see above
from usearch.index import BatchMatches, Index

from grebe.errors import GrebeError


class ANNError(GrebeError):
    """A vector of the wrong dimension, or an index used wrongly."""


class PostANNIndex:
    def __init__(
        self, dim: int, *, connectivity: int = 16, expansion_add: int = 128,
        expansion_search: int = 64, dtype: str = "i8",
    ) -> None:
        """`dtype` is how usearch holds the vectors: "i8" (the default, see above),
        "f16" or "f32" (exact similarities, four times the memory read per search)."""
        if dim < 1:
            raise ANNError(f"dim must be >= 1, got {dim}")
        if dtype not in VECTOR_TYPES:
            raise ANNError(f"dtype must be one of {', '.join(VECTOR_TYPES)}, got {dtype!r}")
        self.dim = dim
        self._index = Index(
            ndim=dim, metric="cos", dtype=dtype, connectivity=connectivity,
            expansion_add=expansion_add, expansion_search=expansion_search,
        )
        self._keys: dict[str, int] = {}
        self._ids: dict[int, str] = {}
        self._next = itertools.count(1)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, post_id: object) -> bool:
        return post_id in self._keys

    def _vectors(
        self, vectors: Sequence[Sequence[float]] | Sequence[float] | np.ndarray
    ) -> np.ndarray:
        array = np.asarray(vectors, dtype=np.float32)
        if array.ndim == 1:
            array = array[None, :]
        if array.ndim != 2 or array.shape[1] != self.dim:
            raise ANNError(f"expected vectors of dimension {self.dim}, got shape {array.shape}")
        if not np.isfinite(array).all():
            raise ANNError("vectors must be finite")
        return array

    def add(self, post_id: str, vector: Sequence[float] | np.ndarray) -> None:
        self.add_many([post_id], self._vectors(vector))

    def add_many(
        self, post_ids: Sequence[str], vectors: Sequence[Sequence[float]] | np.ndarray
    ) -> None:
        array = self._vectors(vectors)
        if len(post_ids) != len(array):
            raise ANNError(f"{len(post_ids)} ids for {len(array)} vectors")
        norms = np.linalg.norm(array, axis=1)
        keep = norms > 0  # a zero vector has no direction: nothing to be similar to
        for post_id in post_ids:
            self.remove(post_id)  # re-adding replaces
        ids = [pid for pid, k in zip(post_ids, keep, strict=True) if k]
        if not ids:
            return
        keys = np.fromiter((next(self._next) for _ in ids), dtype=np.uint64, count=len(ids))
        self._index.add(keys, array[keep])
        for post_id, key in zip(ids, keys.tolist(), strict=True):
            self._keys[post_id] = key
            self._ids[key] = post_id

    def remove(self, post_id: str) -> bool:
        key = self._keys.pop(post_id, None)
        if key is None:
            return False
        del self._ids[key]
        self._index.remove(key)
        return True

    def search(
        self, vector: Sequence[float] | np.ndarray, k: int,
        exclude: Collection[str] = (),
    ) -> list[tuple[str, float]]:
        """Up to k (post id, cosine similarity) pairs, most similar first."""
        return self.search_many(self._vectors(vector), k, exclude)[0]

    def search_many(
        self, vectors: Sequence[Sequence[float]] | np.ndarray, k: int,
        exclude: Collection[str] = (),
    ) -> list[list[tuple[str, float]]]:
        """`search` for several query vectors in batched index calls (one thread: a
        request must not take the cores its neighbours are ranking on). One list per
        vector, in order; a zero vector finds nothing.

        The first call asks for k plus at most k more than the excluded posts could take
        (a viewer's seen posts grow to thousands, and HNSW cost grows with the depth
        asked, so asking k + len(exclude) made a returning viewer's every request
        slower); a query left short because excluded posts filled its neighbourhood is
        asked again, deeper, until it has k or the index has no more."""
        queries = self._vectors(vectors) if len(vectors) else np.empty((0, self.dim))
        out: list[list[tuple[str, float]]] = [[] for _ in range(len(queries))]
        if k <= 0 or not self._keys or not len(queries):
            return out
        pending = np.flatnonzero(np.linalg.norm(queries, axis=1) > 0).tolist()
        depth = k + min(len(exclude), k) + SEARCH_SLACK
        while pending:
            short = []
            for slot, (keys, distances, count) in zip(
                    pending, self._raw_search(queries[pending], depth), strict=True):
                found = self._collect(keys[:count], distances[:count], k, exclude)
                out[slot] = found
                if len(found) < k and count >= depth:  # saturated: there may be more
                    short.append(slot)
            if not short or depth >= len(self._index):
                break
            pending, depth = short, depth * 4
        return out

    def _raw_search(self, queries: np.ndarray, depth: int
                    ) -> list[tuple[list[int], list[float], int]]:
        """(keys, distances, count) per query row, whatever usearch's answer type."""
        matches = self._index.search(queries, depth, threads=1)
        if isinstance(matches, BatchMatches):
            return list(zip(matches.keys.tolist(), matches.distances.tolist(),
                            matches.counts.tolist(), strict=True))
        # one query vector: usearch answers with plain Matches
        return [(matches.keys.tolist(), matches.distances.tolist(), len(matches.keys))]

    def _collect(self, keys: list[int], distances: list[float], k: int,
                 exclude: Collection[str]) -> list[tuple[str, float]]:
        # One comprehension over the ids mapped in C (no method call per neighbour);
        # the first k left after the exclusions.
        found = [(post_id, 1.0 - distance)
                 for post_id, distance in zip(map(self._ids.get, keys), distances, strict=True)
                 if post_id is not None and post_id not in exclude]
        return found[:k]


#: How the index may hold vectors (usearch scalar kinds).
VECTOR_TYPES = ("i8", "f16", "f32")
#: Neighbours asked beyond k (and the excluded): removed-but-not-compacted keys.
SEARCH_SLACK = 8
