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
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import weakref
from typing import Any, overload

# Finished limits stay in the heap until they reach its top or a compaction drops them;
# compact when they outnumber the live ones by this much (amortized O(1) per limit).
_COMPACT_SLACK = 1024

_ACTIVE, _EXPIRING, _EXPIRED, _EXITED = 0, 1, 2, 3


class Deadline:
    """One time limit on the awaits of one asyncio task, from `deadline_at()` until
    `close()`."""

    __slots__ = ("_cancelling", "_heap", "_state", "_task", "when")

    def __init__(self, heap: _DeadlineHeap, when: float, task: asyncio.Task[Any]) -> None:
        self._heap = heap
        self._task = task
        self._cancelling = task.cancelling()
        self._state = _ACTIVE
        self.when = when

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

    def open(self, when: float, task: asyncio.Task[Any]) -> Deadline:
        deadline = Deadline(self, when, task)
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
                self._live -= 1
                deadline._expire()
        while entries and entries[0][2]._state != _ACTIVE:
            heapq.heappop(entries)
        if entries:
            self._arm(entries[0][0])


_heaps: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _DeadlineHeap] = (
    weakref.WeakKeyDictionary()
)


def deadline_at(when: float) -> Deadline:
    """Open a limit at loop time `when` on the current asyncio task; `close()` it when
    the guarded await ends, however it ends."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task(loop)
    if task is None:
        raise RuntimeError("deadline_at() must be used inside an asyncio task")
    heap = _heaps.get(loop)
    if heap is None:
        heap = _heaps[loop] = _DeadlineHeap()
    return heap.open(when, task)
