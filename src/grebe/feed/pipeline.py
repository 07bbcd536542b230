"""The candidate-pipeline framework: a feed is a fixed sequence of small components.

    query hydrators (parallel) -> sources (parallel) -> hydrators (parallel)
    -> filters (in order) -> scorers (in order) -> selector
    -> post-selection hydrators (parallel) -> post-selection filters (in order)
    -> side effects (fire-and-forget)

Each component kind is a one-method protocol. Hydrators and scorers do not mutate:
they return one patch (a dict of attribute -> value) per candidate, in order, or one
`Columns` (attribute -> one value per candidate, in order), and the pipeline applies
them. That keeps parallel hydrators from racing, and lets the pipeline reject a
component that returns the wrong number of values instead of silently misaligning data
onto the wrong posts. `Columns` is the cheap form for ranking-sized batches: a scorer
that computes arrays hands them over as they are, with no dict per candidate.

A component that raises, times out or misbehaves is logged and skipped; the request
still gets an answer. Side effects run after the response is built and never delay it;
they are tracked so `aclose()` can wait for them at shutdown.

Any component may define `enable(query) -> bool`; when it returns False the component
is not run for that query (not an error: e.g. an out-of-network source for a viewer with
no interests). Every log line carries the query's `request_id` (when it has one), and
each component's time and failures are recorded per request (`PipelineResult.timings`)
and, given `PipelineMetrics`, in Prometheus.

Candidates may travel as columns: when every source returns a `CandidateFrame`
(grebe.feed.frame), the pipeline joins them into one frame, writes hydrators' and
scorers' columns into it, and filters and the selector hand back frames (views of the
same rows); objects are built only for the rows looked at (the selected page, the
removed posts, `retrieved` when iterated). Components that work on lists keep working
on lists.

The selector is split as in the specification: `score(candidate)`, `sort(candidates)`,
`size(query)`; `ScoreSelector` sorts by score with NaN scores last (a NaN compares
false with everything, so a plain sort would leave the order arbitrary). The component
kinds, the result type and patch application are in grebe.feed.components.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Generic

from prometheus_client import CollectorRegistry, Counter, Histogram

from grebe.feed.components import (
    C,
    Columns,
    Filter,
    Filtered,
    Hydrator,
    Patches,
    PipelineResult,
    Q,
    QueryHydrator,
    R,
    Scorer,
    Selector,
    SideEffect,
    Source,
    apply_patch,
    apply_patches,
    enabled,
    request_id,
)
from grebe.feed.frame import CandidateFrame

log = logging.getLogger(__name__)

COMPONENT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class PipelineMetrics:
    """Per-component latency, failures and skips (by `enable`), one registry each."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry if registry is not None else CollectorRegistry()
        self.seconds = Histogram(
            "grebe_feed_component_seconds", "Time one pipeline component took",
            ["stage", "component"], buckets=COMPONENT_BUCKETS, registry=r,
        )
        self.errors = Counter(
            "grebe_feed_component_errors_total",
            "Component calls that failed, timed out or broke their contract (skipped)",
            ["stage", "component"], registry=r,
        )
        self.disabled = Counter(
            "grebe_feed_component_disabled_total",
            "Component calls not made because enable(query) was False",
            ["stage", "component"], registry=r,
        )
        self.candidates = Histogram(
            "grebe_feed_source_candidates", "Candidates one source returned",
            ["component"], buckets=(0, 1, 10, 50, 100, 200, 500, 1000, 2000), registry=r,
        )

class _Run:
    """What one request gathers about its components: errors and timings."""

    __slots__ = ("errors", "metrics", "rid", "timings")

    def __init__(self, rid: str, metrics: PipelineMetrics | None) -> None:
        self.rid = rid
        self.metrics = metrics
        self.errors: dict[str, str] = {}
        self.timings: dict[str, float] = {}

    def fail(self, stage: str, name: str, problem: str) -> None:
        self.errors[name] = problem
        log.warning("[%s] feed %s %s skipped: %s", self.rid, stage, name, problem)
        if self.metrics is not None:
            self.metrics.errors.labels(stage, name).inc()

    def took(self, stage: str, name: str, seconds: float) -> None:
        self.timings[name] = seconds
        if self.metrics is not None:
            self.metrics.seconds.labels(stage, name).observe(seconds)


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
        metrics: PipelineMetrics | None = None,
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
        self.metrics = metrics
        self._background: set[asyncio.Task[None]] = set()

    def _on(self, stage: str, components: Sequence[Any], query: Q) -> list[Any]:
        """The components enabled for this query (a raising `enable` counts as off)."""
        out = []
        for component in components:
            try:
                on = enabled(component, query)
            except Exception as exc:
                log.warning("[%s] feed %s %s: enable() raised %s; skipped",
                            request_id(query), stage, component.name, exc)
                on = False
            if on:
                out.append(component)
            elif self.metrics is not None:
                self.metrics.disabled.labels(stage, component.name).inc()
        return out

    async def run(self, query: Q) -> PipelineResult[Q, C]:
        started = time.perf_counter()
        run = _Run(request_id(query), self.metrics)

        patches = await self._gather("query_hydrator", [
            (h.name, partial(h.hydrate, query))
            for h in self._on("query_hydrator", self.query_hydrators, query)], run)
        for patch in patches:
            if patch is not None:
                apply_patch(query, patch)

        sources = self._on("source", self.sources, query)
        fetched = await self._gather(
            "source", [(s.name, partial(s.fetch, query)) for s in sources], run)
        retrieved = joined(fetched)
        if self.metrics is not None:
            for source, batch in zip(sources, fetched, strict=True):
                self.metrics.candidates.labels(source.name).observe(len(batch or ()))

        candidates: Sequence[C] = retrieved if isinstance(retrieved, CandidateFrame) \
            else list(retrieved)
        await self._hydrate("hydrator", self.hydrators, query, candidates, run)
        filtered: list[Filtered[C]] = []
        filters_run: list[str] = []
        candidates = await self._filter(
            "filter", self.filters, query, candidates, filtered, filters_run, run)
        for scorer in self._on("scorer", self.scorers, query):
            scored = await self._call(
                "scorer", scorer.name, partial(scorer.score, query, candidates), run)
            if scored is not None and self._aligned("scorer", scorer.name, scored,
                                                    candidates, run):
                apply_patches(candidates, scored)

        selected = await self._call(
            "selector", self.selector.name,
            partial(self.selector.select, query, candidates), run)
        if selected is None:
            selected = candidates  # a broken selector must not empty the feed
        selected = list(selected)  # the page: objects from here on
        await self._hydrate("post_selection_hydrator", self.post_selection_hydrators,
                            query, selected, run)
        selected = list(await self._filter(
            "post_selection_filter", self.post_selection_filters, query, selected,
            filtered, filters_run, run))

        result = PipelineResult(
            query=query, retrieved=retrieved, filtered=filtered, selected=selected,
            errors=run.errors, timings=run.timings, filters_run=filters_run,
            elapsed_s=time.perf_counter() - started,
        )
        log.debug("[%s] feed: %d retrieved, %d selected in %.1f ms", run.rid,
                  len(retrieved), len(selected), result.elapsed_s * 1000)
        for effect in self._on("side_effect", self.side_effects, query):
            self._spawn(effect.name, effect.run(query, result), run.rid)
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

    def _spawn(self, name: str, coro: Awaitable[None], rid: str) -> None:
        async def guarded() -> None:
            try:
                await coro
            except Exception:
                log.exception("[%s] side effect %s failed", rid, name)
                if self.metrics is not None:
                    self.metrics.errors.labels("side_effect", name).inc()

        task = asyncio.create_task(guarded(), name=f"side-effect:{name}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _call(
        self, stage: str, name: str, call: Callable[[], Awaitable[R]], run: _Run
    ) -> R | None:
        """Run one component; None (and an entry in errors) when it fails or times out.
        `call` is a thunk so even a component that raises before awaiting is caught."""
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.component_timeout_s):
                return await call()
        except TimeoutError:
            run.fail(stage, name, f"timed out after {self.component_timeout_s}s")
        except Exception as exc:
            run.fail(stage, name, f"{type(exc).__name__}: {exc}")
        finally:
            run.took(stage, name, time.perf_counter() - started)
        return None

    async def _gather(
        self, stage: str, calls: list[tuple[str, Callable[[], Awaitable[R]]]], run: _Run
    ) -> list[R | None]:
        return list(await asyncio.gather(*(self._call(stage, n, c, run) for n, c in calls)))

    def _aligned(
        self, stage: str, name: str, patches: Patches, candidates: Sequence[C],
        run: _Run,
    ) -> bool:
        if isinstance(patches, Columns):
            for key, values in patches.items():
                if len(values) != len(candidates):
                    run.fail(stage, name, f"returned {len(values)} values of {key!r} for "
                                          f"{len(candidates)} candidates")
                    return False
            return True
        if len(patches) == len(candidates):
            return True
        run.fail(stage, name,
                 f"returned {len(patches)} results for {len(candidates)} candidates")
        return False

    async def _hydrate(
        self, stage: str, hydrators: Sequence[Hydrator[Q, C]], query: Q,
        candidates: Sequence[C], run: _Run,
    ) -> None:
        hydrators = self._on(stage, hydrators, query)
        if not hydrators or not candidates:
            return
        results = await self._gather(
            stage, [(h.name, partial(h.hydrate, query, candidates)) for h in hydrators], run)
        for hydrator, patches in zip(hydrators, results, strict=True):
            if patches is not None and self._aligned(stage, hydrator.name, patches,
                                                     candidates, run):
                apply_patches(candidates, patches)

    async def _filter(
        self, stage: str, filters: Sequence[Filter[Q, C]], query: Q, candidates: Sequence[C],
        filtered: list[Filtered[C]], filters_run: list[str], run: _Run,
    ) -> Sequence[C]:
        for flt in self._on(stage, filters, query):
            split = await self._call(
                stage, flt.name, partial(flt.filter, query, candidates), run)
            if split is None:
                continue
            kept, removed = split
            if len(kept) + len(removed) != len(candidates):
                run.fail(stage, flt.name, f"kept {len(kept)} + removed {len(removed)} != "
                                          f"{len(candidates)} candidates")
                continue
            filtered.extend(Filtered(candidate=c, filter=flt.name) for c in removed)
            filters_run.append(flt.name)
            candidates = kept if isinstance(kept, CandidateFrame) else list(kept)
        return candidates


def joined(batches: Sequence[Sequence[C] | None]) -> Sequence[C]:
    """The sources' candidates in order: one frame when every source gave a frame (and
    at least one did), else one list (a frame's rows built)."""
    present = [b for b in batches if b is not None]
    if present and all(isinstance(b, CandidateFrame) for b in present):
        return CandidateFrame.concat(present)  # type: ignore[arg-type]
    return [c for batch in present for c in batch]
