"""The plan master: runs every plan a payload is eligible for, and merges their results.

Eligible plans run concurrently and share one `PayloadMemo`, so work two plans both
need (media, transcript, embedding) is done once for the payload. Merge rules, in plan
order: labels concatenated; scores and reasons merged (a later plan wins a key clash);
the first non-None embedding and transcript; success unless a plan FAILED (a skipped
plan is fine); errors "plan/task: ExcType: message" joined with "; ". A payload no plan
is eligible for succeeds with no plans.

Around the plans: a prelude, when `services` offers one (`services.prelude(payload,
plans, memo)`, the `Prelude` protocol), is awaited once before they start, to fill the
payload's memo with the work most of them would each await (grebe.flows.prelude: a
text-only post's language, encoder pass and heads), so they find it done instead of
each suspending on it (an asyncio task, a time limit and a shield a plan). It is only
an optimisation: its errors, or its running past the plans' shortest task limit, end
the wait and nothing else (the plans await the same memo entries under their own
limits). After them, the work they handed to the payload's end (`PayloadMemo.finisher`:
a post's annotations, written together) runs before the result is returned, and what
it fails is recorded on the plans that handed it (`plan_run.finish_payload`).
docs/benchmarks.md, "One prelude and one write per post".
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Sequence
from typing import Any, Protocol

from grebe.constants import DEFAULT_TASK_TIMEOUT_S
from grebe.core.deadlines import WaitLedger, deadline_at, payload_waits
from grebe.core.memo import PayloadMemo, cancel_and_wait
from grebe.core.plan import Plan
from grebe.core.plan_run import PlanResult, ResumedCoroutine, finish_payload
from grebe.core.task import PlanOutput
from grebe.errors import PlanError, is_system_fault
from grebe.types import TaskPayload, TaskResult, TaskStatus


class Prelude(Protocol):
    """Work shared by a payload's plans, started before them (see the module docstring)."""

    async def __call__(
        self, payload: TaskPayload, plans: Sequence[Plan], memo: PayloadMemo
    ) -> None: ...


class PlanMaster:
    """Holds the plans of one engine; `run(payload)` is its one entry point."""

    __slots__ = ("plans", "prelude", "services")

    def __init__(self, plans: Sequence[Plan], *, services: Any = None) -> None:
        names = [plan.name for plan in plans]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise PlanError(f"plan names must be unique; repeated: {', '.join(duplicates)}")
        self.plans: tuple[Plan, ...] = tuple(plans)
        self.services = services
        self.prelude: Prelude | None = getattr(services, "prelude", None)

    def eligible(self, payload: TaskPayload) -> list[Plan]:
        """The plans whose eligibility the payload carries, in plan order."""
        eligibilities = payload.eligibilities
        return [plan for plan in self.plans if plan.eligibility in eligibilities]

    async def run(self, payload: TaskPayload) -> TaskResult:
        # One wait ledger per payload: its tasks' time limits leave out model queue time.
        token = payload_waits.set(WaitLedger())
        try:
            return self.merge(payload, await self.run_plans(payload))
        finally:
            payload_waits.reset(token)

    async def run_plans(self, payload: TaskPayload) -> list[PlanResult]:
        """Each eligible plan's own result, in plan order. Raises only CancelledError."""
        plans = self.eligible(payload)
        if not plans:
            return []
        memo = PayloadMemo()
        services = self.services
        try:
            if self.prelude is not None:
                await self._prelude(self.prelude, payload, plans, memo)
            if len(plans) == 1:
                plan = plans[0]
                results = [await _guarded(plan, plan.run(payload, services=services, memo=memo))]
            else:
                results = await self._run_concurrently(plans, payload, memo)
            await finish_payload(memo, results, _shortest_limit(plans))
            return results
        finally:
            if memo.has_pending:
                await memo.aclose()

    @staticmethod
    async def _prelude(
        prelude: Prelude, payload: TaskPayload, plans: list[Plan], memo: PayloadMemo
    ) -> None:
        """Await the prelude within the shortest task limit of the plans (model queue
        time left out, as for a task); its errors and its time limit only end the wait."""
        limit = _shortest_limit(plans)
        if math.isinf(limit):
            with contextlib.suppress(Exception):  # the plans see it again in the memo
                await prelude(payload, plans, memo)
            return
        deadline = deadline_at(
            asyncio.get_running_loop().time() + limit, payload_waits.get())
        try:
            await prelude(payload, plans, memo)
        except BaseException as exc:
            # A TimeoutError when the limit cancelled it; a cancellation of the payload
            # itself (not an Exception) goes on up.
            if not isinstance(deadline.close(exc), Exception):
                raise
        else:
            deadline.close()

    async def _run_concurrently(
        self, plans: list[Plan], payload: TaskPayload, memo: PayloadMemo
    ) -> list[PlanResult]:
        # Asyncio tasks are created lazily, as in Plan.run: each plan is first stepped
        # here; plans that finish in that step (no I/O) cost no task. The first plan that
        # suspends is kept by this coroutine and every later plan gets its own task, so
        # all eligible plans still run at once.
        loop = asyncio.get_running_loop()
        services = self.services
        results: list[PlanResult | None] = [None] * len(plans)
        kept: tuple[int, Any, Any] | None = None
        spawned: list[tuple[int, asyncio.Task[PlanResult]]] = []
        try:
            for index, plan in enumerate(plans):
                coro = plan.run(payload, services=services, memo=memo)
                if kept is not None:
                    spawned.append((index, loop.create_task(coro)))
                    continue
                started_at = time.time()
                try:
                    first = coro.send(None)
                except StopIteration as stop:
                    results[index] = stop.value
                except Exception as exc:
                    results[index] = _crashed(plan, exc, started_at)
                else:
                    kept = (index, coro, first)
            if kept is not None:
                index, coro, first = kept
                results[index] = await _guarded(plans[index], ResumedCoroutine(coro, first))
            for index, task in spawned:
                results[index] = await _guarded(plans[index], task)
        finally:
            leftovers = [task for _, task in spawned if not task.done()]
            if leftovers:
                await cancel_and_wait(leftovers)
        return results  # type: ignore[return-value]  # every slot is filled above

    @staticmethod
    def merge(payload: TaskPayload, results: Sequence[PlanResult]) -> TaskResult:
        post = payload.post
        if not results:
            now = time.time()
            return TaskResult(
                payload_id=payload.payload_id,
                post_id=post.id,
                success=True,
                started_at=now,
                finished_at=now,
            )
        labels: list[str] = []
        scores: dict[str, float] = {}
        reasons: dict[str, str] = {}
        embedding: list[float] | None = None
        transcript: str | None = None
        errors: list[str] = []
        statuses: dict[str, TaskStatus] = {}
        seconds: dict[str, float] = {}
        for result in results:
            output = result.output
            labels.extend(output.labels)
            scores.update(output.scores)
            reasons.update(output.reasons)
            if embedding is None:
                embedding = output.embedding
            if transcript is None:
                transcript = output.transcript
            if result.task_errors:
                errors.extend(f"{result.plan}/{t}: {e}" for t, e in result.task_errors.items())
            elif result.error:
                errors.append(f"{result.plan}: {result.error}")
            statuses[result.plan] = result.status
            seconds[result.plan] = result.finished_at - result.started_at
        return TaskResult(
            payload_id=payload.payload_id,
            post_id=post.id,
            success=TaskStatus.FAILED not in statuses.values(),
            plans=statuses,
            plan_seconds=seconds,
            labels=labels,
            scores=scores,
            reasons=reasons,
            embedding=embedding,
            transcript=transcript,
            error="; ".join(errors) if errors else None,
            system_fault=any(r.system_fault for r in results),
            rejected=next((r.rejected for r in results if r.rejected), None),
            started_at=min(r.started_at for r in results),
            finished_at=max(r.finished_at for r in results),
        )


def _shortest_limit(plans: Sequence[Plan]) -> float:
    """The shortest default task limit of the plans (a stand-in for a plan without one,
    such as the demo's timing wrapper, counts with the default)."""
    return min(getattr(plan, "task_timeout_s", DEFAULT_TASK_TIMEOUT_S) or math.inf
               for plan in plans)


async def _guarded(plan: Plan, awaitable: Any) -> PlanResult:
    """A plan's result; a plan that raised (a bug, since Plan.run reports task errors in
    its result) becomes a FAILED result instead of losing the other plans' results."""
    started_at = time.time()
    try:
        return await awaitable  # type: ignore[no-any-return]
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise
        return _crashed(plan, exc, started_at)
    except Exception as exc:
        return _crashed(plan, exc, started_at)


def _crashed(plan: Plan, exc: BaseException, started_at: float) -> PlanResult:
    return PlanResult(
        system_fault=is_system_fault(exc),
        plan=plan.name,
        version=plan.version,
        status=TaskStatus.FAILED,
        output=PlanOutput([], {}, {}),
        task_status=dict.fromkeys(plan.task_names, TaskStatus.SKIPPED),
        error=f"{type(exc).__name__}: {exc}",
        started_at=started_at,
        finished_at=time.time(),
    )
