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

How a run executes (lazily created asyncio tasks): grebe.core.plan_run.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from grebe.constants import DEFAULT_TASK_TIMEOUT_S
from grebe.core.memo import PayloadMemo
from grebe.core.plan_run import (
    SKIP_DEADLINE,
    SKIP_RETURNED,
    PlanResult,
    PlanRun,
    ResumedCoroutine,
    finish_payload,
)
from grebe.core.task import PlanOutput, TaskContext, TaskFn, TaskSpec
from grebe.errors import PlanError
from grebe.types import TaskPayload, TaskStatus

__all__ = [
    "SKIP_DEADLINE", "SKIP_RETURNED", "Plan", "PlanResult", "ResumedCoroutine", "wrap_tasks",
]

_SUCCESS = TaskStatus.SUCCESS
_SKIPPED = TaskStatus.SKIPPED
_FAILED = TaskStatus.FAILED

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
        state = PlanRun(self, TaskContext(payload, self.name, {}, output, memo, services))
        try:
            await state.execute()
            result = self._result(state, output, started_at)
            if own_memo:  # nobody else will finish this payload's handed-over work
                await finish_payload(memo, [result], self.task_timeout_s or math.inf)
            return result
        finally:
            if own_memo and memo.has_pending:
                await memo.aclose()

    def _result(self, state: PlanRun, output: PlanOutput, started_at: float) -> PlanResult:
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
