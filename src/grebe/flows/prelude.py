"""A text-only post's shared model work, done once before its plans start.

Six default flows judge the same post text: each awaits its encoder pass, its heads and
its language. Started by the plans themselves, that work is awaited by each plan at
once, so every plan suspends on it: each suspension hands the plan's other ready tasks
to new asyncio tasks, arms the task's time limit and shields the shared future, six
times a post. Awaited once here first (the core's `PlanMaster` prelude hook), it is done
when the plans start, and they run to their sinks in one step each (docs/benchmarks.md,
"One prelude and one write per post").

Each flow declares what its tasks would await (`Flow.prelude`: one of its own tasks that
only fills the payload memo). It is asked only for plans that would reach it: a plan
that its filters skip (post type, engagement, dedupe, language), that is rate limited
(`max_qps`: the limit bounds model work, so nothing is spent ahead of it), or that asks
the chat model is left out, and so are posts with media (their text is known only once
the media is read). The plans still await the same memo entries themselves, so a
prelude that fails or is cut short changes no result.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import CoroutineType
from typing import TYPE_CHECKING, Any

from grebe.core.plan_run import ResumedCoroutine
from grebe.core.task import PlanOutput, TaskContext, TaskFn
from grebe.flows import catalog, shared
from grebe.flows.services import MediaFacts

if TYPE_CHECKING:
    from grebe.core.memo import PayloadMemo
    from grebe.core.plan import Plan
    from grebe.flows.services import FlowServices
    from grebe.types import TaskPayload

NO_MEDIA = MediaFacts()  # what the `media` task gives a post without media

_by_plan: tuple[tuple[catalog.Flow, ...], dict[str, TaskFn]] = ((), {})


def preludes() -> dict[str, TaskFn]:
    """Plan name -> its flow's prelude, following the catalog (tests refresh it)."""
    global _by_plan
    flows = catalog.flows()
    if flows is not _by_plan[0]:
        _by_plan = (flows, {f.name: f.prelude for f in flows if f.prelude is not None})
    return _by_plan[1]


async def warm(services: FlowServices, payload: TaskPayload, plans: Sequence[Plan],
               memo: PayloadMemo) -> None:
    """Start the prelude of each plan that would reach it, then await them all. Each is
    stepped by hand until it first waits (as the core steps plans), so the language
    guess, the encoder pass and the summary are all queued before any is awaited: a
    post waits for the slowest, not for their sum."""
    if payload.post.media:
        return
    found = preludes()
    started: list[tuple[CoroutineType[Any, Any, Any], Any]] = []
    try:
        for plan in plans:
            prelude = found.get(plan.name)
            if prelude is None:
                continue
            ctx = TaskContext(payload, plan.name, {"media": NO_MEDIA},
                              PlanOutput([], {}, {}), memo, services)
            if not await _reaches_models(ctx):
                continue
            work = prelude(ctx)
            if not isinstance(work, CoroutineType):
                await work
                continue
            try:
                started.append((work, work.send(None)))
            except StopIteration:
                continue
        while started:
            await ResumedCoroutine(*started.pop(0))
    finally:
        for work, _ in started:  # the payload was cancelled, or a prelude failed
            work.close()


async def _reaches_models(ctx: TaskContext) -> bool:
    """The plan's filters let the post through and no rate limit stands before its
    models (what `shared.filters` and `shared.rate_limit` would decide, without
    recording anything)."""
    settings = shared.settings_of(ctx)
    if settings.max_qps is not None or shared.uses_llm(ctx):
        return False
    if shared.skip_before_language(ctx, settings):
        return False
    return not settings.languages or (await shared.language(ctx)) in settings.languages
