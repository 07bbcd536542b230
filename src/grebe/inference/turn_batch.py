"""Calls made during one event-loop turn, scored in one batched call.

Some models are too cheap to deserve a MicroBatcher's queue, thread hop and wait, yet
cost several times more one row at a time than in a batch: the trained text heads
(grebe.inference.heads) take 0.28 ms for one post alone and 0.098 ms a post in a batch
(docs/benchmarks.md, Real flows). Their callers arrive together anyway: an encoder batch
of 64 resolves 64 futures at once, and the 64 tasks resume in the same loop turn. So
`TurnBatcher.submit()` queues the item and, for the first item of a turn, schedules a
flush with `call_soon`: it runs after every callback already ready, that is after the
other resumed tasks had their turn to submit. No thread, no timer, nothing to start or
stop; the batch runs on the loop (the call must be short).

A batch that raises is retried one item at a time, so one bad input (a non-finite
vector) fails only its own caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

from grebe.errors import InferenceError

T = TypeVar("T")
R = TypeVar("R")

BatchFn = Callable[[list[T]], Sequence[R]]


class TurnBatcher(Generic[T, R]):
    """Gathers `submit(key, fn, item)` calls of one loop turn into one `fn(items)` per
    key (one model, one batch)."""

    def __init__(self) -> None:
        self._pending: dict[Hashable, tuple[BatchFn[T, R], list[tuple[T, asyncio.Future[R]]]]] = {}
        self.batches = 0  # plain counters for tests and benchmarks
        self.items = 0

    def submit(self, key: Hashable, fn: BatchFn[T, R], item: T) -> asyncio.Future[R]:
        """Queue `item` for this turn's call of `fn` (grouped by `key`); await the
        returned future for its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.setdefault(key, (fn, []))[1].append((item, future))
        return future

    def _flush(self) -> None:
        pending, self._pending = self._pending, {}
        for fn, entries in pending.values():
            live = [(item, future) for item, future in entries if not future.done()]
            if live:
                self._run(fn, live)

    def _run(self, fn: BatchFn[T, R], entries: list[tuple[T, asyncio.Future[R]]]) -> None:
        self.batches += 1
        self.items += len(entries)
        try:
            results = fn([item for item, _ in entries])
            if len(results) != len(entries):
                raise InferenceError(
                    f"batch function returned {len(results)} results for {len(entries)} items")
        except Exception as exc:
            if len(entries) > 1:
                for entry in entries:
                    self._run(fn, [entry])
            else:
                entries[0][1].set_exception(exc)
            return
        for (_, future), result in zip(entries, results, strict=True):
            future.set_result(result)
