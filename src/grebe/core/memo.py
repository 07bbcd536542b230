"""Shared work is done once: per payload (`PayloadMemo`) and across payloads (`SharedCache`).

Several plans of one payload need the same media, OCR text, transcript or embedding. On
this CPU one embedding costs ~8-9 ms, so computing it once instead of once per plan is
the biggest throughput lever. Both classes run a computation as its own asyncio task and
let every caller await it through `asyncio.shield`: a caller that times out or is
cancelled does not abort the work the other callers are waiting for. Both are bound to
the event loop they are used on (one per process); they are not thread-safe.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, Protocol, TypeVar

from cachetools import TTLCache

T = TypeVar("T")
F = TypeVar("F", bound="Finisher")


async def _call(factory: Callable[[], Awaitable[T]]) -> T:
    # The factory is called inside the task, so a factory that raises before returning
    # its awaitable fails the computation like any other error.
    return await factory()


def _retrieve(task: asyncio.Task[Any]) -> None:
    # Marks a failure as retrieved: a computation nobody waited for anymore must not log
    # "Task exception was never retrieved".
    if not task.cancelled():
        task.exception()


async def cancel_and_wait(tasks: Sequence[asyncio.Future[Any]]) -> None:
    """Cancel tasks and wait until every one has finished, even if we are cancelled
    meanwhile (then re-raise once they are done): nothing is left running."""
    for task in tasks:
        task.cancel()
    cancelled = False
    pending = set(tasks)
    while pending:
        try:
            _, pending = await asyncio.wait(pending)
        except asyncio.CancelledError:
            cancelled = True
            for task in pending:
                task.cancel()
    if cancelled:
        raise asyncio.CancelledError


class Finisher(Protocol):
    """Work a payload's plans hand to its end (a post's annotations written together):
    `finish()` runs once, after every plan of the payload has finished and before its
    result is returned, and says which plans it failed: {plan: (task, error)}."""

    async def finish(self) -> dict[str, tuple[str, BaseException]]: ...

    def tasks(self) -> dict[str, str]:
        """The plans that handed it work, and the task of each that did."""
        ...


class PayloadMemo:
    """Per-payload memo: `get_or_compute(key, factory)` runs `factory` once per key, and
    every caller — concurrent or later, from any plan of this payload — gets the same
    value.

    A failure is shared too: all callers of this payload see the same exception, and it
    is not retried within this memo (a retry of the payload gets a fresh memo). The
    owner (`PlanMaster`, or `Plan.run` when given none) calls `aclose()` when the payload
    is done, cancelling computations nobody awaits anymore.
    """

    __slots__ = ("_borrowed", "_closed", "_entries", "_finishers")

    def __init__(self) -> None:
        self._entries: dict[str, asyncio.Future[Any]] = {}
        self._borrowed: set[str] = set()  # entries someone else runs (adopt)
        self._closed = False
        self._finishers: dict[str, Finisher] | None = None

    def finisher(self, key: str, build: Callable[[], F]) -> F:
        """The payload's one `key` Finisher, built on first use: plans add to it, its
        owner (`PlanMaster`, or `Plan.run` with a memo of its own) runs it at the end."""
        if self._finishers is None:
            self._finishers = {}
        found = self._finishers.get(key)
        if found is None:
            found = self._finishers[key] = build()
        return found  # type: ignore[return-value]

    def take_finishers(self) -> list[Finisher]:
        """The finishers added so far, each handed out once."""
        found, self._finishers = self._finishers, None
        return list(found.values()) if found else []

    async def get_or_compute(self, key: str, factory: Callable[[], Awaitable[T]]) -> T:
        task = self._entries.get(key)
        if task is None:
            if self._closed:
                raise RuntimeError(f"PayloadMemo is closed; cannot compute {key!r}")
            task = asyncio.get_running_loop().create_task(_call(factory))
            task.add_done_callback(_retrieve)
            self._entries[key] = task
        if task.done():
            return task.result()
        return await asyncio.shield(task)

    def entry(self, key: str) -> asyncio.Future[Any] | None:
        """The computation of `key` (running or done), None when there is none yet."""
        return self._entries.get(key)

    def adopt(self, key: str, start: Callable[[], asyncio.Future[T]]) -> asyncio.Future[T]:
        """Make a computation someone else runs (`start()` returns it: a SharedCache's,
        serving other payloads too) this payload's entry for `key`: callers share it as
        if the memo ran it, but `aclose()` leaves it running. One asyncio task per shared
        computation instead of a memo task awaiting the cache's task
        (grebe.flows.shared.shared). Nothing is started once the memo is closed."""
        if self._closed:
            raise RuntimeError(f"PayloadMemo is closed; cannot compute {key!r}")
        future = start()
        self._entries[key] = future
        self._borrowed.add(key)
        return future

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def _owned_pending(self) -> list[asyncio.Future[Any]]:
        borrowed = self._borrowed
        return [task for key, task in self._entries.items()
                if not task.done() and key not in borrowed]

    @property
    def has_pending(self) -> bool:
        """True while a computation this memo runs is unfinished (so `aclose()` has
        work to do)."""
        return bool(self._entries) and bool(self._owned_pending())

    async def aclose(self) -> None:
        """Cancel and await every unfinished computation this memo runs (not adopted
        ones); later calls raise."""
        self._closed = True
        pending = self._owned_pending()
        if pending:
            await cancel_and_wait(pending)


class SharedCache:
    """A bounded TTL cache (cachetools.TTLCache) across payloads and retries, with the
    same `get_or_compute` contract as `PayloadMemo` and one computation per key at a
    time: concurrent callers of a key being computed await that computation.

    Only successful values are cached. A failure is seen by the callers that were
    waiting for that computation; the next caller starts a new one.
    """

    def __init__(
        self, *, maxsize: int, ttl_s: float, timer: Callable[[], float] = time.monotonic
    ) -> None:
        if maxsize < 1:
            raise ValueError(f"SharedCache maxsize must be >= 1, got {maxsize}")
        if not ttl_s > 0:
            raise ValueError(f"SharedCache ttl_s must be > 0, got {ttl_s}")
        self._cache: TTLCache[Hashable, Any] = TTLCache(maxsize=maxsize, ttl=ttl_s, timer=timer)
        self._inflight: dict[Hashable, asyncio.Task[Any]] = {}

    async def get_or_compute(self, key: Hashable, factory: Callable[[], Awaitable[T]]) -> T:
        try:
            return self._cache[key]  # type: ignore[no-any-return]
        except KeyError:
            pass
        task = self._task(key, factory)
        if task.done():
            return task.result()
        return await asyncio.shield(task)

    def future(self, key: Hashable, factory: Callable[[], Awaitable[T]]) -> asyncio.Future[T]:
        """`get_or_compute` as a future, without awaiting it: the cached value (a done
        future), else the computation of `key` in flight, started if there is none. For
        a PayloadMemo to adopt (`PayloadMemo.adopt`)."""
        try:
            value = self._cache[key]
        except KeyError:
            return self._task(key, factory)
        done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        done.set_result(value)
        return done

    def _task(self, key: Hashable, factory: Callable[[], Awaitable[T]]) -> asyncio.Task[T]:
        """The computation of `key` in flight; a new one when there is none or the last
        one failed."""
        task = self._inflight.get(key)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = asyncio.get_running_loop().create_task(self._compute(key, factory))
            task.add_done_callback(_retrieve)
            self._inflight[key] = task
        return task

    async def _compute(self, key: Hashable, factory: Callable[[], Awaitable[T]]) -> T:
        try:
            value = await factory()
            self._cache[key] = value
            return value
        finally:
            if self._inflight.get(key) is asyncio.current_task():
                del self._inflight[key]

    def put(self, key: Hashable, value: Any) -> None:
        """Cache a value computed elsewhere (work that must stop with its caller, such
        as media hydration, runs in the payload memo and only its result lands here)."""
        self._cache[key] = value

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The cached value, or `default` if absent or expired (never computes)."""
        return self._cache.get(key, default)

    def invalidate(self, key: Hashable) -> None:
        self._cache.pop(key, None)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._cache

    def __len__(self) -> int:
        """Entries currently cached (expired entries are dropped first)."""
        self._cache.expire()
        return len(self._cache)

    async def aclose(self) -> None:
        """Cancel and await computations in flight (at shutdown)."""
        pending = [task for task in self._inflight.values() if not task.done()]
        self._inflight.clear()
        if pending:
            await cancel_and_wait(pending)
