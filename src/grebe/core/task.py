"""What a plan's tasks are made of: the task signature, its context, SKIP and the output.

A task is a plain `async def task(ctx: TaskContext) -> Any`. Returning `SKIP` (or
raising `SkipTask`) says "nothing to do for this post", and every task downstream of it
is skipped without running; raising anything else fails the plan. This module holds
only vocabulary; `grebe.core.plan` runs it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from grebe.types import TaskPayload

if TYPE_CHECKING:
    from grebe.core.memo import PayloadMemo


class Skip:
    """The type of `SKIP`. There is one instance, so tasks compare with `is`; it also
    stays the same object through pickling (plans may run in worker processes)."""

    __slots__ = ()
    _instance: Skip | None = None

    def __new__(cls) -> Skip:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "SKIP"

    def __reduce__(self) -> str:
        return "SKIP"  # pickle by reference to the module global


SKIP: Final = Skip()


class SkipTask(Exception):
    """Raise to skip the current task (same as returning SKIP) from deep inside a helper.

    The optional first argument is the reason, reported in `PlanResult.skip_reasons`."""

    @property
    def reason(self) -> str:
        return str(self.args[0]) if self.args else "SkipTask"


@dataclass(slots=True)
class PlanOutput:
    """What a plan's tasks contribute to the payload's result. Tasks add to it in place;
    the plan's sink task reads it to build the annotation it writes."""

    labels: list[str]
    scores: dict[str, float]
    reasons: dict[str, str]
    embedding: list[float] | None = None
    transcript: str | None = None
    model_versions: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class TaskContext:
    """Everything a task may touch. One context is shared by all tasks of one plan run
    (building one per task would cost more than a no-op task itself).

    `results` holds the return value of every task of this run that has succeeded so far,
    by task name. A task's predecessors are always there when it starts; read only
    those — whether an unrelated branch has finished yet is a matter of timing.
    """

    payload: TaskPayload
    plan: str
    results: dict[str, Any]
    output: PlanOutput
    memo: PayloadMemo
    services: Any


TaskFn = Callable[[TaskContext], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """A task with its own timeout. `timeout_s=None` means the plan's default;
    `math.inf` means no timeout at all (and no timeout bookkeeping either)."""

    fn: TaskFn
    timeout_s: float | None = None
