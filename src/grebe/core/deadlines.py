"""Task time limits with one loop timer for all of them, not one timer per await.

`asyncio.timeout_at` arms a loop timer per use and walks a pure-Python state machine on
enter and exit: ~5-9 us per suspended plan task on this machine, as much as the rest of
the suspending path together. Here every limit of one event loop goes into one heap and
a single timer is armed for the earliest; starting a limit is a heap push, ending it a
flag. Plans mostly share one timeout, so a new limit is rarely the earliest and the
timer is rarely re-armed.

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
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
import weakref
from contextvars import ContextVar
from typing import Any, overload

from grebe.constants import WAIT_CREDIT_MAX_S

# Finished limits stay in the heap until they reach its top or a compaction drops them;
# compact when they outnumber the live ones by this much (amortized O(1) per limit).
_COMPACT_SLACK = 1024

_ACTIVE, _EXPIRING, _EXPIRED, _EXITED = 0, 1, 2, 3
_MIN_CREDIT_S = 0.001  # smaller waits are not worth re-arming the timer for


class WaitLedger:
    """Time one payload spent with at least one request queued for a model (the union
    of the intervals, so concurrent requests are not counted twice)."""

    __slots__ = ("_pending", "_since", "_total")

    def __init__(self) -> None:
        self._pending = 0
        self._since = 0.0
        self._total = 0.0

    def begin(self) -> None:
        """A request of the payload was queued."""
        if self._pending == 0:
            self._since = time.monotonic()
        self._pending += 1

    def end(self) -> None:
        """A request of the payload left the queue (its batch started, or it failed)."""
        self._pending -= 1
        if self._pending == 0:
            self._total += time.monotonic() - self._since

    def waited(self) -> float:
        """Seconds queued so far, including a wait still under way."""
        if self._pending:
            return self._total + time.monotonic() - self._since
        return self._total


# The ledger of the payload being run (None outside a plan master's run).
payload_waits: ContextVar[WaitLedger | None] = ContextVar("grebe_payload_waits", default=None)


class Deadline:
    """One time limit on the awaits of one asyncio task, from `deadline_at()` until
    `close()`."""

    __slots__ = ("_cancelling", "_credited", "_heap", "_ledger", "_state", "_task", "when")

    def __init__(
        self, heap: _DeadlineHeap, when: float, task: asyncio.Task[Any],
        ledger: WaitLedger | None = None,
    ) -> None:
        self._heap = heap
        self._task = task
        self._cancelling = task.cancelling()
        self._state = _ACTIVE
        self.when = when
        self._ledger = ledger
        # Queue time before the limit opened is not this task's wait.
        self._credited = ledger.waited() if ledger is not None else 0.0

    def _uncredited_wait(self) -> float:
        """Queued time since the last credit, within WAIT_CREDIT_MAX_S in all."""
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
            self._heap.closed()
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

    def _expire(self) -> None:
        self._state = _EXPIRING
        self._task.cancel()


class _DeadlineHeap:
    """The limits of one event loop and its one timer."""

    # No reference to the loop: the heap is the value of a weak mapping keyed by it.
    __slots__ = ("_entries", "_live", "_seq", "_timer", "_timer_at")

    def __init__(self) -> None:
        self._entries: list[tuple[float, int, Deadline]] = []
        self._live = 0
        self._seq = itertools.count()
        self._timer: asyncio.Handle | None = None
        self._timer_at = math.inf

    def open(
        self, when: float, task: asyncio.Task[Any], ledger: WaitLedger | None = None
    ) -> Deadline:
        deadline = Deadline(self, when, task, ledger)
        entries = self._entries
        if len(entries) > 2 * self._live + _COMPACT_SLACK:
            entries[:] = [e for e in entries if e[2]._state == _ACTIVE]
            heapq.heapify(entries)
        heapq.heappush(entries, (when, next(self._seq), deadline))
        self._live += 1
        if when < self._timer_at:
            self._arm(when)
        return deadline

    def closed(self) -> None:
        self._live -= 1

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        loop = asyncio.get_running_loop()
        # A limit already past fires before whatever the task awaits can resume (a timer
        # due now would run after the callbacks already queued), as asyncio.Timeout does.
        if when <= loop.time():
            self._timer = loop.call_soon(self._fire)
        else:
            self._timer = loop.call_at(when, self._fire)

    def _fire(self) -> None:
        # What the timer was armed for is due even if the loop's clock reads a hair
        # earlier (uvloop rounds timers to milliseconds), as with asyncio.Timeout.
        due = max(asyncio.get_running_loop().time(), self._timer_at)
        self._timer = None
        self._timer_at = math.inf
        entries = self._entries
        while entries and entries[0][0] <= due:
            deadline = heapq.heappop(entries)[2]
            if deadline._state == _ACTIVE:
                extra = deadline._uncredited_wait()
                if extra > _MIN_CREDIT_S:  # it waited for a model: push the limit back
                    deadline.when += extra
                    heapq.heappush(entries, (deadline.when, next(self._seq), deadline))
                    continue
                self._live -= 1
                deadline._expire()
        while entries and entries[0][2]._state != _ACTIVE:
            heapq.heappop(entries)
        if entries:
            self._arm(entries[0][0])


_heaps: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _DeadlineHeap] = (
    weakref.WeakKeyDictionary()
)


def deadline_at(when: float, ledger: WaitLedger | None = None) -> Deadline:
    """Open a limit at loop time `when` on the current asyncio task; `close()` it when
    the guarded await ends, however it ends. With a `ledger`, time the payload spends
    queued for a model from now on pushes the limit back (see the module docstring)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task(loop)
    if task is None:
        raise RuntimeError("deadline_at() must be used inside an asyncio task")
    heap = _heaps.get(loop)
    if heap is None:
        heap = _heaps[loop] = _DeadlineHeap()
    return heap.open(when, task, ledger)
