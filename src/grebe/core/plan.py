"""A plan: a small DAG of async tasks gated by one eligibility, and its executor.

    plan = Plan("spam", {"filter": filter_, "classify": classify, "sink": sink},
                {"classify": ["filter"], "sink": ["classify"]}, eligibility="spam_comment")

Rules, checked at construction (`PlanError`): every dependency names a task of the plan,
and there is no cycle (the message names it: "plan 'x' has a cycle: a -> b -> a", where
`a -> b` reads "b depends on a").

Rules of a run:
- Every task starts as soon as all its predecessors have finished (tasks without
  predecessors start together).
- A task whose predecessor did not succeed — it returned `SKIP`, raised `SkipTask`, was
  itself skipped, or failed — is SKIPPED without running. Dependents of a failed task
  are SKIPPED, not FAILED: only the task that raised is FAILED, so `task_status` and
  `error` point at the cause. Independent branches keep running to the end.
- A task that raises fails; so does one that runs past its timeout (`TaskSpec.timeout_s`,
  else the plan's `task_timeout_s`), with a TimeoutError message. Time the payload spent
  queued for a model does not count (core.deadlines: waiting is not running).
- A task about to start after the payload's deadline (`payload.expired()`) is SKIPPED.
- Plan status: FAILED if any task failed; else SKIPPED if any task was skipped; else
  SUCCESS.
- When `run()` returns or raises (including when it is cancelled), every task has a
  status and no asyncio task of the run is left running.

Speed (the runtime budget is a few microseconds per task): asyncio tasks are created
lazily. A ready task is first stepped by hand in the coroutine that released it; most
no-op, filtering or cached tasks finish in that one step and cost no asyncio task and
no timer. Only when a task really suspends (I/O, a model call) does its coroutine keep
it, arm its timeout (measured from the task's start, so the semantics are those of
`async with asyncio.timeout(t): await task`, on one shared timer: core.deadlines) and
hand the other ready tasks to fresh asyncio tasks, so nothing ready waits behind it.
A chain or a no-op diamond thus runs with no asyncio task at all. One consequence:
tasks run in the context (contextvars, `asyncio.current_task()`) of whichever coroutine
stepped them, as with plain `await`s.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import time
import types
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from grebe.constants import DEFAULT_TASK_TIMEOUT_S
from grebe.core.deadlines import Deadline, deadline_at, payload_waits
from grebe.core.memo import PayloadMemo, cancel_and_wait
from grebe.core.task import SKIP, PlanOutput, SkipTask, TaskContext, TaskFn, TaskSpec
from grebe.errors import PlanError, PostRejectedError, is_system_fault
from grebe.types import TaskPayload, TaskStatus

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


def _check_timeout(plan: str, what: str, value: float) -> float | None:
    """Validate a timeout; `None` stands for infinity (no timeout machinery at all)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise PlanError(f"plan {plan!r}: {what} must be a positive number, got {value!r}")
    return None if math.isinf(value) else float(value)


def _find_cycle(names: Sequence[str], succs: Mapping[str, Sequence[str]]) -> list[str] | None:
    """The first cycle found by an iterative depth-first search, closed (a, b, a)."""
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(names, white)
    for root in names:
        if color[root] != white:
            continue
        color[root] = grey
        path = [root]
        stack = [iter(succs[root])]
        while stack:
            for nxt in stack[-1]:
                if color[nxt] == grey:
                    return [*path[path.index(nxt) :], nxt]
                if color[nxt] == white:
                    color[nxt] = grey
                    path.append(nxt)
                    stack.append(iter(succs[nxt]))
                    break
            else:
                color[path.pop()] = black
                stack.pop()
    return None


class Plan:
    """A named DAG of tasks, gated by one eligibility. Immutable once built; `run()` may
    be called concurrently for many payloads."""

    __slots__ = (
        "_fns",
        "_names",
        "_npreds",
        "_own_timeout",
        "_roots",
        "_succs",
        "_timeouts",
        "_uses_default",
        "deps",
        "eligibility",
        "name",
        "task_timeout_s",
        "topological_order",
        "version",
    )

    def __init__(
        self,
        name: str,
        tasks: Mapping[str, TaskFn | TaskSpec],
        deps: Mapping[str, Sequence[str]] | None = None,
        *,
        eligibility: str,
        version: str = "1",
        task_timeout_s: float | None = None,
    ) -> None:
        """`task_timeout_s=None`: the deployment's default (`engine.task_timeout_s`,
        applied by grebe.app.bundles.build_bundle; DEFAULT_TASK_TIMEOUT_S until then)."""
        if not isinstance(name, str) or not name:
            raise PlanError(f"a plan name must be a non-empty string, got {name!r}")
        if not isinstance(eligibility, str) or not eligibility:
            raise PlanError(f"plan {name!r}: eligibility must be a non-empty string")
        if not isinstance(tasks, Mapping) or not tasks:
            raise PlanError(f"plan {name!r} has no tasks")
        self._uses_default = task_timeout_s is None
        if task_timeout_s is None:
            task_timeout_s = DEFAULT_TASK_TIMEOUT_S
        default_timeout = _check_timeout(name, "task_timeout_s", task_timeout_s)

        fns: dict[str, TaskFn] = {}
        timeouts: dict[str, float | None] = {}
        own: dict[str, bool] = {}  # the task has its own timeout (TaskSpec.timeout_s)
        for task_name, task in tasks.items():
            if not isinstance(task_name, str) or not task_name:
                raise PlanError(f"plan {name!r}: task names must be non-empty strings")
            own[task_name] = isinstance(task, TaskSpec) and task.timeout_s is not None
            if isinstance(task, TaskSpec):
                fn = task.fn
                timeout = (
                    default_timeout
                    if task.timeout_s is None
                    else _check_timeout(name, f"timeout of task {task_name!r}", task.timeout_s)
                )
            else:
                fn, timeout = task, default_timeout
            if not callable(fn):
                raise PlanError(f"plan {name!r}: task {task_name!r} is not callable: {fn!r}")
            fns[task_name] = fn
            timeouts[task_name] = timeout

        deps = {} if deps is None else deps
        if not isinstance(deps, Mapping):
            raise PlanError(f"plan {name!r}: deps must be a mapping of task -> predecessors")
        unknown = [key for key in deps if key not in fns]
        if unknown:
            raise PlanError(
                f"plan {name!r}: deps given for unknown task(s): {', '.join(map(repr, unknown))}"
            )
        normalized: dict[str, tuple[str, ...]] = {}
        for task_name in fns:
            preds = deps.get(task_name, ())
            if isinstance(preds, str) or not isinstance(preds, Sequence):
                raise PlanError(
                    f"plan {name!r}: deps of {task_name!r} must be a list of task names, "
                    f"got {preds!r}"
                )
            missing = [p for p in preds if p not in fns]
            if missing:
                raise PlanError(
                    f"plan {name!r}: task {task_name!r} depends on unknown task(s): "
                    f"{', '.join(map(repr, missing))}"
                )
            normalized[task_name] = tuple(dict.fromkeys(preds))  # dedupe, keep order

        declared = list(fns)
        succs: dict[str, list[str]] = {t: [] for t in declared}
        for task_name, preds in normalized.items():
            for pred in preds:
                succs[pred].append(task_name)
        cycle = _find_cycle(declared, succs)
        if cycle is not None:
            raise PlanError(f"plan {name!r} has a cycle: {' -> '.join(cycle)}")

        # Kahn's algorithm, ties broken by declaration order so the order is stable.
        position = {t: k for k, t in enumerate(declared)}
        indegree = {t: len(normalized[t]) for t in declared}
        heap = [position[t] for t in declared if indegree[t] == 0]
        heapq.heapify(heap)
        order: list[str] = []
        while heap:
            task_name = declared[heapq.heappop(heap)]
            order.append(task_name)
            for succ in succs[task_name]:
                indegree[succ] -= 1
                if indegree[succ] == 0:
                    heapq.heappush(heap, position[succ])

        self.name = name
        self.eligibility = eligibility
        self.version = version
        self.task_timeout_s = task_timeout_s
        self.topological_order: tuple[str, ...] = tuple(order)
        self.deps: Mapping[str, tuple[str, ...]] = MappingProxyType(normalized)

        # Everything the executor needs, by topological index.
        index = {t: k for k, t in enumerate(order)}
        self._names = self.topological_order
        self._fns = tuple(fns[t] for t in order)
        self._timeouts = tuple(timeouts[t] for t in order)
        self._own_timeout = tuple(own[t] for t in order)
        # Successors in descending order: workers pop ready tasks from the end of a
        # list, so tasks released together start in topological order.
        self._succs = tuple(
            tuple(sorted((index[s] for s in succs[t]), reverse=True)) for t in order
        )
        self._npreds = tuple(len(normalized[t]) for t in order)
        self._roots = tuple(k for k, t in enumerate(order) if not normalized[t])

    def apply_default_timeout(self, task_timeout_s: float) -> None:
        """Give the deployment's default limit (`engine.task_timeout_s`) to the tasks
        that use the default: not to a plan built with its own `task_timeout_s`, nor to
        a task with its own TaskSpec timeout. Call before the plan runs."""
        if not self._uses_default:
            return
        limit = _check_timeout(self.name, "engine.task_timeout_s", task_timeout_s)
        self.task_timeout_s = task_timeout_s
        self._timeouts = tuple(
            current if own else limit
            for current, own in zip(self._timeouts, self._own_timeout, strict=True)
        )

    @property
    def task_names(self) -> tuple[str, ...]:
        """Task names in declaration order."""
        return tuple(self.deps)

    def __repr__(self) -> str:
        return f"Plan({self.name!r}, eligibility={self.eligibility!r}, tasks={list(self.deps)})"

    async def run(
        self, payload: TaskPayload, *, services: Any = None, memo: PayloadMemo | None = None
    ) -> PlanResult:
        """Run every task of the plan for one payload. Never raises for a task's failure
        (that is in the result); raises only CancelledError if cancelled itself.

        `memo` is the payload's memo, shared with the payload's other plans; without one
        the plan uses (and closes) its own."""
        started_at = time.time()
        own_memo = memo is None
        if memo is None:
            memo = PayloadMemo()
        output = PlanOutput([], {}, {})
        state = _PlanRun(self, TaskContext(payload, self.name, {}, output, memo, services))
        try:
            await state.execute()
        finally:
            if own_memo and memo.has_pending:
                await memo.aclose()
        statuses = state.status
        status = _FAILED if _FAILED in statuses else _SKIPPED if _SKIPPED in statuses else _SUCCESS
        errors = state.errors
        names = self._names
        # Positional arguments: this runs once per plan per post, and keywords cost.
        return PlanResult(
            self.name,
            self.version,
            status,
            output,
            dict(zip(names, statuses)),  # noqa: B905 — same length by construction
            "; ".join(f"{names[k]}: {errors[k]}" for k in sorted(errors)) if errors else None,
            started_at,
            time.time(),
            state.skip_reasons,
            {names[k]: errors[k] for k in sorted(errors)} if errors else {},
            state.system_fault,
            state.rejected,
        )


class _PlanRun:
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


def wrap_tasks(plan: Plan, wrap: Callable[[str, TaskFn], TaskFn]) -> Plan:
    """The same plan (deps, timeouts, eligibility, version) with each task function
    replaced by `wrap(task name, fn)`: how tracing adds a span per task without the
    executor knowing about it."""
    by_name = {
        name: (plan._fns[k], plan._timeouts[k]) for k, name in enumerate(plan._names)
    }
    tasks = {
        name: TaskSpec(wrap(name, fn), timeout_s=math.inf if timeout is None else timeout)
        for name, (fn, timeout) in ((n, by_name[n]) for n in plan.task_names)
    }
    return Plan(plan.name, tasks, dict(plan.deps), eligibility=plan.eligibility,
                version=plan.version, task_timeout_s=plan.task_timeout_s)
