"""The candidate pipeline's component kinds and how their output is applied.

Each kind is a one-method protocol (see grebe.feed.pipeline for the order they run in).
Hydrators and scorers return patches (one dict per candidate, in order) or `Columns`
(attribute -> one value per candidate); `apply_patches` writes either onto a list of
candidates or into a `CandidateFrame`. Any component may define `enable(query)`."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

import msgspec
import numpy as np

from grebe.feed.frame import CandidateFrame

log = logging.getLogger(__name__)

Q = TypeVar("Q")
C = TypeVar("C")
Q_contra = TypeVar("Q_contra", contravariant=True)
C_contra = TypeVar("C_contra", contravariant=True)
C_co = TypeVar("C_co", covariant=True)
R = TypeVar("R")

Patch = Mapping[str, Any]


class Columns(dict[str, Sequence[Any] | np.ndarray]):
    """A columnar patch: attribute -> one value per candidate, in candidate order
    (lists or 1-d arrays). Every column must be as long as the candidates."""


#: What a hydrator or scorer returns: one patch per candidate, or columns.
Patches = Sequence[Patch] | Columns


class QueryHydrator(Protocol[Q_contra]):
    """Fetch what the request needs besides itself (the viewer's graph, interests)."""

    name: str

    async def hydrate(self, query: Q_contra) -> Patch: ...


class Source(Protocol[Q_contra, C_co]):
    name: str

    async def fetch(self, query: Q_contra) -> Sequence[C_co]: ...


class Hydrator(Protocol[Q_contra, C_contra]):
    """One patch per candidate, same order and length as `candidates`."""

    name: str

    async def hydrate(self, query: Q_contra, candidates: Sequence[C_contra]
                      ) -> Patches: ...


class Filter(Protocol[Q_contra, C]):
    """Split candidates into (kept, removed)."""

    name: str

    async def filter(self, query: Q_contra, candidates: Sequence[C]
                     ) -> tuple[Sequence[C], Sequence[C]]: ...


class Scorer(Protocol[Q_contra, C_contra]):
    """One patch per candidate (e.g. {"score": 0.7}); later scorers see earlier ones."""

    name: str

    async def score(self, query: Q_contra, candidates: Sequence[C_contra]
                    ) -> Patches: ...


class Selector(Protocol[Q_contra, C]):
    name: str

    async def select(self, query: Q_contra, candidates: Sequence[C]) -> Sequence[C]: ...


class ScoreSelector(Generic[Q, C]):
    """select = sort(candidates)[:size(query)]; sort is by `score(candidate)` descending,
    NaN scores last (counted in `nan_scores`), ties in `tiebreak` order."""

    name = "score_selector"

    def __init__(self) -> None:
        self.nan_scores = 0

    def score(self, candidate: C) -> float:
        return float(getattr(candidate, "score", 0.0))

    def tiebreak(self, candidate: C) -> Any:
        return 0

    def size(self, query: Q) -> int | None:
        return None

    def sort(self, candidates: list[C]) -> list[C]:
        keyed = []
        for c in candidates:
            value = self.score(c)
            if math.isnan(value):
                self.nan_scores += 1
                log.warning("selector %s: NaN score for %r; ranked last", self.name,
                            getattr(c, "post_id", c))
                value = -math.inf
            keyed.append((-value, self.tiebreak(c), c))
        keyed.sort(key=lambda item: (item[0], item[1]))
        return [c for _, _, c in keyed]

    def shortlist(self, candidates: list[C], limit: int) -> list[C]:
        """The candidates that can make the top `limit`, in their order: those scoring at
        least the limit-th best score (ties all kept, so `tiebreak` still decides). One
        array pass instead of sorting every candidate by a Python key; the result of
        `sort` on the shortlist equals the head of `sort` on all of them."""
        values = np.fromiter((self.score(c) for c in candidates), dtype=np.float64,
                             count=len(candidates))
        return [candidates[i] for i in self._best(values, limit).tolist()]

    def _best(self, values: np.ndarray, limit: int) -> np.ndarray:
        """Positions of the values that can make the top `limit` (see `shortlist`)."""
        values = values.astype(np.float64)  # a copy: NaNs are replaced below
        nan = np.isnan(values)
        values[nan] = -np.inf
        cut = len(values) - limit
        threshold = np.partition(values, cut)[cut]
        keep = values >= threshold
        dropped_nan = int(np.count_nonzero(nan & ~keep))
        if dropped_nan:
            self.nan_scores += dropped_nan
            log.warning("selector %s: %d NaN scores; ranked last", self.name, dropped_nan)
        return np.flatnonzero(keep)

    async def select(self, query: Q, candidates: Sequence[C]) -> list[C]:
        limit = self.size(query)
        if isinstance(candidates, CandidateFrame):
            # Columns: the shortlist from the score column, objects for it alone.
            if limit is not None and 0 < limit < len(candidates) \
                    and candidates.has("score") \
                    and type(self).score is ScoreSelector.score:
                candidates = candidates.take(
                    self._best(candidates.column("score"), limit))
            candidates = list(candidates)
        elif limit is not None and 0 < limit < len(candidates):
            candidates = self.shortlist(list(candidates), limit)
        ranked = self.sort(list(candidates))
        return ranked if limit is None else ranked[:limit]


class Filtered(msgspec.Struct, Generic[C]):
    candidate: C
    filter: str


class PipelineResult(msgspec.Struct, Generic[Q, C], kw_only=True):
    query: Q
    #: Every candidate the sources returned (a CandidateFrame when they gave columns).
    retrieved: Sequence[C]
    filtered: list[Filtered[C]]
    selected: list[C]
    #: component name -> what went wrong with it (it was skipped)
    errors: dict[str, str] = {}
    #: component name -> seconds it took (components disabled for the query absent)
    timings: dict[str, float] = {}
    #: the filters that ran on this request (a candidate selected passed all of them)
    filters_run: list[str] = []
    elapsed_s: float = 0.0

    def filtered_by(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for item in self.filtered:
            counts[item.filter] = counts.get(item.filter, 0) + 1
        return counts


class SideEffect(Protocol[Q, C]):
    """Runs after the response is ready (log impressions, warm caches); never awaited
    by the request."""

    name: str

    async def run(self, query: Q, result: PipelineResult[Q, C]) -> None: ...



def apply_patch(target: Any, patch: Patch) -> None:
    for key, value in patch.items():
        setattr(target, key, value)


def apply_patches(candidates: Sequence[Any], patches: Patches) -> None:
    """Apply aligned patches (checked by the caller) to the candidates."""
    if isinstance(candidates, CandidateFrame):
        if isinstance(patches, Columns):
            for key, values in patches.items():
                candidates.set(key, values)
            return
        for key in {key for patch in patches for key in patch}:  # patches per row
            have = [i for i, patch in enumerate(patches) if key in patch]
            candidates.take(have).set(key, [patches[i][key] for i in have])
        return
    if isinstance(patches, Columns):
        for key, values in patches.items():
            for candidate, value in zip(candidates, values, strict=True):
                setattr(candidate, key, value)
        return
    for candidate, patch in zip(candidates, patches, strict=True):
        apply_patch(candidate, patch)


def enabled(component: object, query: object) -> bool:
    """A component without `enable` is always on."""
    enable = getattr(component, "enable", None)
    return True if enable is None else bool(enable(query))


def request_id(query: object) -> str:
    return str(getattr(query, "request_id", "") or "-")
