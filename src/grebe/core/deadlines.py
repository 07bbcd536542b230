"""Task time limits that leave out time spent queued for a model.

A limit is one loop timer (`call_at`) on the awaiting asyncio task, opened by
`deadline_at()` and ended by `Deadline.close()`; the hand-stepped executor
(grebe.core.plan_run) opens one only when a task really suspends. An earlier version
kept every limit of a loop in one heap behind one shared timer: open + close of a limit
around a suspending await cost 1.65 us of CPU against 2.4 us for this plain timer
(uvloop, 200k limits, best of 5), i.e. ~8 us per post for a flow with ten suspending
tasks, against ~12 ms of CPU a real post costs: not worth 80 more lines. (Not
`asyncio.timeout_at`: it cannot push a limit back by the model queue time below.)

The semantics are those of `asyncio.timeout_at(when)` around one await: when the limit
passes, the awaiting asyncio task is cancelled; `Deadline.close()` then turns that
CancelledError into a TimeoutError unless somebody else cancelled the task as well
(same `cancelling()`/`uncancel()` accounting as asyncio.Timeout).

Waiting is not running. A task's limit measures its own run, not time its payload spent
queued for a shared model behind other payloads' work: on a busy host that wait grows
with admission, not with the post, and counting it dead-lettered good posts. So each
payload has a `WaitLedger` (in the `payload_waits` context variable, set by the plan
master and inherited by the tasks it creates); model batchers record on it while a
request of the payload is queued, and a limit that comes due is first pushed back by
the queued time it has not been credited yet (at most WAIT_CREDIT_MAX_S in all). The
check is made only when a limit fires, so it costs nothing on the fast path.

Inside a batch, the other payloads' share is waiting too: a batch of n texts computes
for n texts' time, of which one payload's k texts are its own run. So while a batch
runs, each payload in it is credited (n-k)/n of the elapsed time (`run_begin`/`run_end`).
Without it two sequential model calls of a 64-text batch at 0.25 s a text (16 s each)
outran the 30 s limit inside the batches (110 of 800 posts dead-lettered,
docs/architecture.md). A call alone in its batch (k = n) earns nothing, so a hung model
call still times out at its limit; in a hung batch a payload with k of its n items
times out after limit * n / k, or limit + WAIT_CREDIT_MAX_S if that comes first.
"""

from __future__ import annotations

import asyncio
import time
from contextvars import ContextVar
from typing import Any, Protocol, overload

from grebe.constants import WAIT_CREDIT_MAX_S

_ACTIVE, _EXPIRING, _EXPIRED, _EXITED = 0, 1, 2, 3
_MIN_CREDIT_S = 0.001  # smaller waits are not worth re-arming the timer for


class WaitLedger:
    """Time one payload spent waiting for a model: fully while at least one of its
    requests is queued (the union of the intervals, so concurrent requests are not
    counted twice), else the largest other-payloads' share of the batches it is in."""

    __slots__ = ("_pending", "_running", "_since", "_total")

    def __init__(self) -> None:
        self._pending = 0
        self._running: list[float] = []  # the others' share of each batch it is in
        self._since = 0.0
        self._total = 0.0

    def _rate(self) -> float:
        """Seconds credited per second now."""
        if self._pending:
            return 1.0
        return max(self._running) if self._running else 0.0

    def _settle(self) -> None:
        """Book the time since the last event at the rate that held through it."""
        now = time.monotonic()
        if self._pending or self._running:
            self._total += self._rate() * (now - self._since)
        self._since = now

    def begin(self) -> None:
        """A request of the payload was queued."""
        self._settle()
        self._pending += 1

    def end(self) -> None:
        """A request of the payload left the queue (its batch started, or it failed)."""
        self._settle()
        self._pending -= 1

    def run_begin(self, share: float) -> None:
        """A batch holding this payload's requests started; `share` in [0, 1) is the
        part of its compute that is other payloads' items."""
        self._settle()
        self._running.append(share)

    def run_end(self, share: float) -> None:
        """That batch ended (however it ended)."""
        self._settle()
        self._running.remove(share)

    def waited(self) -> float:
        """Seconds credited so far, including a wait still under way."""
        if self._pending or self._running:
            return self._total + self._rate() * (time.monotonic() - self._since)
        return self._total


# The ledger of the payload being run (None outside a plan master's run).
payload_waits: ContextVar[WaitLedger | None] = ContextVar("grebe_payload_waits", default=None)


class Queued(Protocol):
    """A request of one payload that queues for a shared resource (a model batcher, a
    media pipeline stage), maybe more than once: `ledger` is payload_waits at its
    creation, `queued` whether a stay in a queue is being booked on it."""

    ledger: WaitLedger | None
    queued: bool


def queue_begins(request: Queued) -> None:
    """The request entered a queue: book the wait on its ledger (no-op if booked)."""
    if request.ledger is not None and not request.queued:
        request.ledger.begin()
        request.queued = True


def queue_ends(request: Queued) -> None:
    """The request left the queue (it runs, fails or is dropped): once per begin."""
    if request.ledger is not None and request.queued:
        request.ledger.end()
        request.queued = False


class Deadline:
    """One time limit on the awaits of one asyncio task, from `deadline_at()` until
    `close()`."""

    __slots__ = ("_cancelling", "_credited", "_ledger", "_state", "_task", "_timer", "when")

    def __init__(
        self, when: float, task: asyncio.Task[Any], ledger: WaitLedger | None = None
    ) -> None:
        self._task = task
        self._cancelling = task.cancelling()
        self._state = _ACTIVE
        self.when = when
        self._ledger = ledger
        # Queue time before the limit opened is not this task's wait.
        self._credited = ledger.waited() if ledger is not None else 0.0
        self._timer: asyncio.Handle = self._arm(asyncio.get_running_loop())

    def _arm(self, loop: asyncio.AbstractEventLoop) -> asyncio.Handle:
        # A limit already past fires before whatever the task awaits can resume (a timer
        # due now would run after the callbacks already queued), as asyncio.Timeout does.
        if self.when <= loop.time():
            return loop.call_soon(self._fire)
        return loop.call_at(self.when, self._fire)

    def _fire(self) -> None:
        if self._state != _ACTIVE:
            return
        extra = self._uncredited_wait()
        if extra > _MIN_CREDIT_S:  # it waited for a model: push the limit back
            self.when += extra
            self._timer = self._arm(asyncio.get_running_loop())
            return
        self._state = _EXPIRING
        self._task.cancel()

    def _uncredited_wait(self) -> float:
        """Wait (queued, or the others' share of a batch) since the last credit, within
        WAIT_CREDIT_MAX_S in all."""
        ledger = self._ledger
        if ledger is None:
            return 0.0
        waited = min(ledger.waited(), self._credited + WAIT_CREDIT_MAX_S)
        extra = waited - self._credited
        self._credited = waited
        return extra

    def expired(self) -> bool:
        """True once the limit passed while it was open (the task was cancelled for it)."""
        return self._state == _EXPIRING or self._state == _EXPIRED

    @overload
    def close(self, exc: None = None) -> None: ...

    @overload
    def close(self, exc: BaseException) -> BaseException: ...

    def close(self, exc: BaseException | None = None) -> BaseException | None:
        """End the limit; `exc` is what the guarded await raised, if anything. Returns
        the exception to handle instead: a TimeoutError when the limit cancelled the
        task and nobody else did, else `exc` itself."""
        state = self._state
        if state == _ACTIVE:
            self._state = _EXITED
            self._timer.cancel()
            return exc
        if state == _EXPIRING:
            self._state = _EXPIRED
            if (
                self._task.uncancel() <= self._cancelling
                and isinstance(exc, asyncio.CancelledError)
            ):
                timeout = TimeoutError()
                timeout.__cause__ = exc
                return timeout
        return exc


def deadline_at(when: float, ledger: WaitLedger | None = None) -> Deadline:
    """Open a limit at loop time `when` on the current asyncio task; `close()` it when
    the guarded await ends, however it ends. With a `ledger`, time the payload spends
    queued for a model from now on pushes the limit back (see the module docstring)."""
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("deadline_at() must be used inside an asyncio task")
    return Deadline(when, task, ledger)
