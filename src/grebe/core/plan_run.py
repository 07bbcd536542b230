"""Running one plan for one payload: the executor behind `Plan.run`.

Speed (the runtime budget is a few microseconds per task): asyncio tasks are created
lazily. A ready task is first stepped by hand in the coroutine that released it; most
no-op, filtering or cached tasks finish in that one step and cost no asyncio task and
no timer. Only when a task really suspends (I/O, a model call) does its coroutine keep
it, arm its timeout (measured from the task's start, so the semantics are those of
`async with asyncio.timeout(t): await task`, via core.deadlines) and
hand the other ready tasks to fresh asyncio tasks, so nothing ready waits behind it.
A chain or a no-op diamond thus runs with no asyncio task at all. One consequence:
tasks run in the context (contextvars, `asyncio.current_task()`) of whichever coroutine
stepped them, as with plain `await`s.

Why this path stays (measured for issue 10, 2 shared cores at load ~9, uvloop):
bench/plan.py runs a no-op 6-task plan at 21.6-21.8 us per payload here against
70-193 us for the straightforward executor (one asyncio task per plan task under
`asyncio.wait_for`), and 31 us against 284 us for a payload of two plans.
bench/runtime.py's whole no-op runtime costs ~75 us CPU per post, so the straightforward
executor would double or triple it and miss its targets (docs/benchmarks.md). For the
real flows (~12 ms of CPU per post) the difference is under 2%: simplify here only
together with those targets.
"""

from __future__ import annotations

import asyncio
import time
import types
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from grebe.core.deadlines import Deadline, deadline_at, payload_waits
from grebe.core.memo import PayloadMemo, cancel_and_wait
from grebe.core.task import SKIP, PlanOutput, SkipTask, TaskContext
from grebe.errors import PostRejectedError, is_system_fault
from grebe.types import TaskStatus

if TYPE_CHECKING:
    from grebe.core.plan import Plan

_SUCCESS = TaskStatus.SUCCESS
_SKIPPED = TaskStatus.SKIPPED
_FAILED = TaskStatus.FAILED
_CoroutineType = types.CoroutineType

SKIP_RETURNED = "returned SKIP"
SKIP_DEADLINE = "payload deadline expired"
_NOT_STEPPED = object()
_monotonic = time.monotonic


@dataclass(slots=True)
class PlanResult:
    """The outcome of one plan for one payload. `error` is "task: ExcType: message" for
    each failed task, joined with "; " in topological order (`task_errors` has the same by
    task name). `skip_reasons` says why each skipped task was skipped."""

    plan: str
    version: str
    status: TaskStatus
    output: PlanOutput
    task_status: dict[str, TaskStatus]
    error: str | None
    started_at: float
    finished_at: float
    skip_reasons: dict[str, str] = field(default_factory=dict)
    task_errors: dict[str, str] = field(default_factory=dict)  # task -> "ExcType: message"
    system_fault: bool = False  # a task failed for the system's fault (errors.is_system_fault)
    rejected: str | None = None  # a task rejected the post for good (errors.PostRejectedError)


class ResumedCoroutine:
    """Awaitable continuing a coroutine that was already stepped once by hand (`first` is
    what it yielded), exactly as `await` would have continued it: values sent and
    exceptions thrown (cancellation) pass through, and its yields go to the running
    asyncio task. This is how the executor creates asyncio tasks only on demand."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: types.CoroutineType[Any, Any, Any], first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        value = self._first
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:
                try:
                    value = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as stop:
                    return stop.value



class PlanRun:
    """The state of one run of one plan, by topological index, and its workers.

    A worker is a coroutine working through a list of ready tasks: it steps each one; a
    task that finishes at once releases its successors into the same list; the first
    that suspends is kept (awaited) by the worker, and the rest of the list goes to new
    workers, each an asyncio task. `run()` itself is the first worker."""

    __slots__ = (
        "crash",
        "ctx",
        "done",
        "doomed",
        "errors",
        "plan",
        "rejected",
        "remaining",
        "skip_reasons",
        "spawned",
        "status",
        "system_fault",
        "waiting",
    )

    def __init__(self, plan: Plan, ctx: TaskContext) -> None:
        n = len(plan._names)
        self.plan = plan
        self.ctx = ctx
        self.status: list[Any] = [None] * n  # TaskStatus once decided
        self.doomed: list[str | None] = [None] * n  # why a task must be skipped
        self.waiting = list(plan._npreds)  # predecessors not decided yet
        self.remaining = n  # tasks not decided yet
        self.errors: dict[int, str] = {}  # "ExcType: message" by index
        self.skip_reasons: dict[str, str] = {}
        self.spawned: list[asyncio.Task[None]] | None = None
        self.done: asyncio.Future[None] | None = None  # set when `remaining` reaches 0
        self.crash: BaseException | None = None  # a worker died of an executor bug
        self.system_fault = False  # a task failed for the system's fault, not the post's
        self.rejected: str | None = None  # a task rejected the post for good

    async def execute(self) -> None:
        try:
            await self._work(list(reversed(self.plan._roots)))
            if self.remaining:
                if self.crash is not None:
                    raise self.crash
                self.done = asyncio.get_running_loop().create_future()
                await self.done
        finally:
            if self.spawned:
                leftovers = [task for task in self.spawned if not task.done()]
                if leftovers:
                    await cancel_and_wait(leftovers)

    async def _work(self, pending: list[int]) -> None:
        """Decide every task in `pending` and whatever they release, in this coroutine,
        until one suspends."""
        plan = self.plan
        fns = plan._fns
        timeouts = plan._timeouts
        doomed = self.doomed
        ctx = self.ctx
        payload = ctx.payload
        has_deadline = payload.deadline is not None
        while pending:
            k = pending.pop()
            reason = doomed[k]
            if reason is None and has_deadline and payload.expired():
                reason = SKIP_DEADLINE
            if reason is not None:
                self._skip(k, reason)
                self._release(k, pending)
                continue
            timeout = timeouts[k]
            start = _monotonic() if timeout is not None else 0.0
            try:
                awaitable = fns[k](ctx)
                # A Future or another awaitable is not stepped, just awaited (below).
                first = awaitable.send(None) if type(awaitable) is _CoroutineType else _NOT_STEPPED
            except StopIteration as stop:
                self._succeed(k, stop.value)
                self._release(k, pending)
                continue
            except BaseException as exc:
                if not self._absorb(k, exc, None, timeout):
                    raise
                self._release(k, pending)
                continue
            # Task k suspended: keep it here, and start the other ready tasks elsewhere.
            if pending:
                self._spawn(pending)
                pending = []
            await self._finish(k, awaitable, first, start, timeout)
            self._release(k, pending)

    def _spawn(self, pending: list[int]) -> None:
        loop = asyncio.get_running_loop()
        if self.spawned is None:
            self.spawned = []
        for k in pending:
            task = loop.create_task(self._work([k]))
            task.add_done_callback(self._worker_done)
            self.spawned.append(task)

    def _worker_done(self, task: asyncio.Task[None]) -> None:
        # `_work` raises only for a cancellation or an executor bug; a bug must surface
        # from run() instead of leaving it waiting for tasks nobody will decide.
        if task.cancelled():
            return
        crash = task.exception()
        if crash is None:
            return
        self.crash = crash
        if self.done is not None and not self.done.done():
            self.done.set_exception(crash)

    async def _finish(
        self, k: int, awaitable: Any, first: Any, start: float, limit_s: float | None
    ) -> None:
        """Await task k to the end (under its time limit) and record the outcome."""
        resumed = awaitable if first is _NOT_STEPPED else ResumedCoroutine(awaitable, first)
        if limit_s is None:
            try:
                value = await resumed
            except BaseException as exc:
                if not self._absorb(k, exc, None, limit_s):
                    raise
            else:
                self._succeed(k, value)
            return
        # `start` is on the monotonic clock; the loop may keep its own (uvloop caches it
        # per iteration), so convert via the time already spent.
        elapsed = _monotonic() - start
        deadline = deadline_at(
            asyncio.get_running_loop().time() + limit_s - elapsed, payload_waits.get()
        )
        try:
            value = await resumed
        except BaseException as exc:
            # close() hands back a TimeoutError if the limit cancelled the task, and
            # _absorb records that as a timeout; anything it does not absorb is `exc`.
            if not self._absorb(k, deadline.close(exc), deadline, limit_s):
                raise
        else:
            deadline.close()
            self._succeed(k, value)

    def _absorb(
        self, k: int, exc: BaseException, deadline: Deadline | None, timeout: Any
    ) -> bool:
        """Record what task k's exception means; False if it must propagate instead (a
        cancellation of the run itself, KeyboardInterrupt, SystemExit)."""
        if isinstance(exc, SkipTask):
            self._skip(k, exc.reason)
        elif isinstance(exc, TimeoutError) and deadline is not None and deadline.expired():
            self._fail(k, exc, f"timed out after {timeout:g}s")
        elif isinstance(exc, asyncio.CancelledError):
            task = asyncio.current_task()
            if task is None or task.cancelling():
                return False  # we are being cancelled
            self._fail(k, exc)  # a task's own stray CancelledError is just an error
        elif isinstance(exc, Exception):
            self._fail(k, exc)
        else:
            return False
        return True

    def _succeed(self, k: int, value: Any) -> None:
        if value is SKIP:
            self._skip(k, SKIP_RETURNED)
        else:
            self.status[k] = _SUCCESS
            self.ctx.results[self.plan._names[k]] = value

    def _skip(self, k: int, reason: str) -> None:
        self.status[k] = _SKIPPED
        self.skip_reasons[self.plan._names[k]] = reason

    def _fail(self, k: int, exc: BaseException, message: str | None = None) -> None:
        self.status[k] = _FAILED
        if is_system_fault(exc):
            self.system_fault = True
        elif isinstance(exc, PostRejectedError):
            self.rejected = exc.reason
        text = str(exc) if message is None else message
        kind = type(exc).__name__
        self.errors[k] = f"{kind}: {text}" if text else kind

    def _release(self, k: int, pending: list[int]) -> None:
        """Task k is decided: successors it was the last to wait for become ready."""
        self.remaining -= 1
        if not self.remaining:  # the last task (so it has no successors)
            if self.done is not None and not self.done.done():
                self.done.set_result(None)
            return
        succs = self.plan._succs[k]
        if succs:
            outcome = self.status[k]
            if outcome is not _SUCCESS:
                why = (
                    f"upstream {self.plan._names[k]!r} "
                    f"{'failed' if outcome is _FAILED else 'was skipped'}"
                )
                doomed = self.doomed
                for s in succs:
                    if doomed[s] is None:
                        doomed[s] = why
            waiting = self.waiting
            for s in succs:
                waiting[s] -= 1
                if not waiting[s]:
                    pending.append(s)


async def finish_payload(memo: PayloadMemo, results: list[PlanResult], limit_s: float) -> None:
    """Run the work the payload's plans handed to its end (`PayloadMemo.finisher`), within
    `limit_s` (model queue time left out, as for a task), and record what it failed on
    the plans it names: their task FAILED, as if the task itself had raised (a timeout
    fails every plan still waiting on it)."""
    finishers = memo.take_finishers()
    if not finishers:
        return
    by_plan = {result.plan: result for result in results}
    deadline = None
    if limit_s != float("inf"):
        deadline = deadline_at(asyncio.get_running_loop().time() + limit_s, payload_waits.get())
    try:
        for finisher in finishers:
            for plan, (task, error) in (await finisher.finish()).items():
                if plan in by_plan:
                    fail_task(by_plan[plan], task, error)
    except BaseException as exc:
        found = deadline.close(exc) if deadline is not None else exc
        if not (isinstance(found, TimeoutError) and deadline is not None and deadline.expired()):
            raise
        for finisher in finishers:
            for plan, task in finisher.tasks().items():
                if plan in by_plan and by_plan[plan].task_status.get(task) is not _FAILED:
                    fail_task(by_plan[plan], task, found, f"timed out after {limit_s:g}s")
        return
    if deadline is not None:
        deadline.close()


def fail_task(result: PlanResult, task: str, exc: BaseException,
              message: str | None = None) -> None:
    """Mark `task` of a finished plan FAILED with `exc`, as PlanRun records a failure."""
    text = str(exc) if message is None else message
    kind = type(exc).__name__
    result.status = _FAILED
    result.task_status[task] = _FAILED
    result.task_errors[task] = f"{kind}: {text}" if text else kind
    result.error = "; ".join(f"{name}: {error}" for name, error in result.task_errors.items())
    if is_system_fault(exc):
        result.system_fault = True
    elif isinstance(exc, PostRejectedError):
        result.rejected = exc.reason
