"""The candidate-pipeline framework: a feed is a fixed sequence of small components.

    query hydrators (parallel) -> sources (parallel) -> hydrators (parallel)
    -> filters (in order) -> scorers (in order) -> selector
    -> post-selection hydrators (parallel) -> post-selection filters (in order)
    -> side effects (fire-and-forget)

Each component kind is a one-method protocol. Hydrators and scorers do not mutate:
they return one patch (a dict of attribute -> value) per candidate, in order, and the
pipeline applies the patches. That keeps parallel hydrators from racing, and lets the
pipeline reject a component that returns the wrong number of patches instead of
silently misaligning data onto the wrong posts.

A component that raises, times out or misbehaves is logged and skipped; the request
still gets an answer. Side effects run after the response is built and never delay it;
they are tracked so `aclose()` can wait for them at shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

import msgspec

log = logging.getLogger(__name__)

Q = TypeVar("Q")
C = TypeVar("C")
Q_contra = TypeVar("Q_contra", contravariant=True)
C_contra = TypeVar("C_contra", contravariant=True)
C_co = TypeVar("C_co", covariant=True)
R = TypeVar("R")

Patch = Mapping[str, Any]


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
                      ) -> Sequence[Patch]: ...


class Filter(Protocol[Q_contra, C]):
    """Split candidates into (kept, removed)."""

    name: str

    async def filter(self, query: Q_contra, candidates: list[C]) -> tuple[list[C], list[C]]: ...


class Scorer(Protocol[Q_contra, C_contra]):
    """One patch per candidate (e.g. {"score": 0.7}); later scorers see earlier ones."""

    name: str

    async def score(self, query: Q_contra, candidates: Sequence[C_contra]
                    ) -> Sequence[Patch]: ...


class Selector(Protocol[Q_contra, C]):
    name: str

    async def select(self, query: Q_contra, candidates: list[C]) -> list[C]: ...


class SideEffect(Protocol[Q, C]):
    """Runs after the response is ready (log impressions, warm caches); never awaited
    by the request."""

    name: str

    async def run(self, query: Q, result: PipelineResult[Q, C]) -> None: ...


class Filtered(msgspec.Struct, Generic[C]):
    candidate: C
    filter: str


class PipelineResult(msgspec.Struct, Generic[Q, C], kw_only=True):
    query: Q
    retrieved: list[C]
    filtered: list[Filtered[C]]
    selected: list[C]
    #: component name -> what went wrong with it (it was skipped)
    errors: dict[str, str] = {}
    elapsed_s: float = 0.0

    def filtered_by(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for item in self.filtered:
            counts[item.filter] = counts.get(item.filter, 0) + 1
        return counts


class ComponentError(Exception):
    """A component broke its contract (wrong count, bad output); it is skipped."""


def apply_patch(target: Any, patch: Patch) -> None:
    for key, value in patch.items():
        setattr(target, key, value)


class CandidatePipeline(Generic[Q, C]):
    def __init__(
        self,
        *,
        sources: Sequence[Source[Q, C]],
        selector: Selector[Q, C],
        query_hydrators: Sequence[QueryHydrator[Q]] = (),
        hydrators: Sequence[Hydrator[Q, C]] = (),
        filters: Sequence[Filter[Q, C]] = (),
        scorers: Sequence[Scorer[Q, C]] = (),
        post_selection_hydrators: Sequence[Hydrator[Q, C]] = (),
        post_selection_filters: Sequence[Filter[Q, C]] = (),
        side_effects: Sequence[SideEffect[Q, C]] = (),
        component_timeout_s: float | None = 1.0,
    ) -> None:
        self.sources = list(sources)
        self.selector = selector
        self.query_hydrators = list(query_hydrators)
        self.hydrators = list(hydrators)
        self.filters = list(filters)
        self.scorers = list(scorers)
        self.post_selection_hydrators = list(post_selection_hydrators)
        self.post_selection_filters = list(post_selection_filters)
        self.side_effects = list(side_effects)
        self.component_timeout_s = component_timeout_s
        self._background: set[asyncio.Task[None]] = set()

    async def run(self, query: Q) -> PipelineResult[Q, C]:
        started = time.perf_counter()
        errors: dict[str, str] = {}

        patches = await self._gather(
            [(h.name, partial(h.hydrate, query)) for h in self.query_hydrators], errors)
        for patch in patches:
            if patch is not None:
                apply_patch(query, patch)

        fetched = await self._gather(
            [(s.name, partial(s.fetch, query)) for s in self.sources], errors)
        retrieved: list[C] = [c for batch in fetched if batch is not None for c in batch]

        candidates = list(retrieved)
        await self._hydrate(self.hydrators, query, candidates, errors)
        filtered: list[Filtered[C]] = []
        candidates = await self._filter(self.filters, query, candidates, filtered, errors)
        for scorer in self.scorers:
            scored = await self._call(
                scorer.name, partial(scorer.score, query, candidates), errors)
            if scored is not None and self._aligned(scorer.name, scored, candidates, errors):
                for candidate, patch in zip(candidates, scored, strict=True):
                    apply_patch(candidate, patch)

        selected = await self._call(
            self.selector.name, partial(self.selector.select, query, candidates), errors)
        if selected is None:
            selected = candidates  # a broken selector must not empty the feed
        await self._hydrate(self.post_selection_hydrators, query, selected, errors)
        selected = await self._filter(
            self.post_selection_filters, query, selected, filtered, errors)

        result = PipelineResult(
            query=query, retrieved=retrieved, filtered=filtered, selected=selected,
            errors=errors, elapsed_s=time.perf_counter() - started,
        )
        for effect in self.side_effects:
            self._spawn(effect.name, effect.run(query, result))
        return result

    async def aclose(self, timeout_s: float = 5.0) -> None:
        """Wait for running side effects (cancel those still going after timeout_s)."""
        if not self._background:
            return
        _done, pending = await asyncio.wait(set(self._background), timeout=timeout_s)
        for task in pending:
            log.warning("side effect %s still running at shutdown; cancelled",
                        task.get_name())
            task.cancel()
        if pending:
            await asyncio.wait(pending)

    @property
    def pending_side_effects(self) -> int:
        return len(self._background)

    # ---- helpers -----------------------------------------------------------------

    def _spawn(self, name: str, coro: Awaitable[None]) -> None:
        async def guarded() -> None:
            try:
                await coro
            except Exception:
                log.exception("side effect %s failed", name)

        task = asyncio.create_task(guarded(), name=f"side-effect:{name}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _call(
        self, name: str, call: Callable[[], Awaitable[R]], errors: dict[str, str]
    ) -> R | None:
        """Run one component; None (and an entry in errors) when it fails or times out.
        `call` is a thunk so even a component that raises before awaiting is caught."""
        try:
            async with asyncio.timeout(self.component_timeout_s):
                return await call()
        except TimeoutError:
            errors[name] = f"timed out after {self.component_timeout_s}s"
        except Exception as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"
        log.warning("feed component %s skipped: %s", name, errors[name])
        return None

    async def _gather(
        self, calls: list[tuple[str, Callable[[], Awaitable[R]]]], errors: dict[str, str]
    ) -> list[R | None]:
        return list(await asyncio.gather(*(self._call(n, c, errors) for n, c in calls)))

    def _aligned(
        self, name: str, patches: Sequence[Patch], candidates: Sequence[C],
        errors: dict[str, str],
    ) -> bool:
        if len(patches) == len(candidates):
            return True
        errors[name] = f"returned {len(patches)} results for {len(candidates)} candidates"
        log.warning("feed component %s rejected: %s", name, errors[name])
        return False

    async def _hydrate(
        self, hydrators: Sequence[Hydrator[Q, C]], query: Q, candidates: list[C],
        errors: dict[str, str],
    ) -> None:
        if not hydrators or not candidates:
            return
        results = await self._gather(
            [(h.name, partial(h.hydrate, query, candidates)) for h in hydrators], errors)
        for hydrator, patches in zip(hydrators, results, strict=True):
            if patches is not None and self._aligned(hydrator.name, patches, candidates, errors):
                for candidate, patch in zip(candidates, patches, strict=True):
                    apply_patch(candidate, patch)

    async def _filter(
        self, filters: Sequence[Filter[Q, C]], query: Q, candidates: list[C],
        filtered: list[Filtered[C]], errors: dict[str, str],
    ) -> list[C]:
        for flt in filters:
            split = await self._call(
                flt.name, partial(flt.filter, query, candidates), errors)
            if split is None:
                continue
            kept, removed = split
            if len(kept) + len(removed) != len(candidates):
                errors[flt.name] = (f"kept {len(kept)} + removed {len(removed)} != "
                                    f"{len(candidates)} candidates")
                log.warning("feed filter %s rejected: %s", flt.name, errors[flt.name])
                continue
            filtered.extend(Filtered(candidate=c, filter=flt.name) for c in removed)
            candidates = list(kept)
        return candidates
