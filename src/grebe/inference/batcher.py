"""Dynamic micro-batching: many concurrent single requests -> one batched model call.

Tasks ask for one embedding at a time; a model is cheapest per item when it sees many
at once (or at least never sits idle). `MicroBatcher` queues requests, gathers up to
`max_batch_size` of them — waiting at most `max_wait_ms` after the first one for
companions — and runs the batch function on a thread pool (ONNX Runtime and
CTranslate2 release the GIL) while the event loop keeps collecting the next batch.

Policies, decided here once:
- Backpressure: the request queue is bounded (`max_queue`); `submit()` awaits while
  it is full, so a burst slows its producers instead of growing memory.
- Batch failure: if a batch of more than one item raises, each item is retried alone
  (`retry_singly=True`, the default) so one poisonous input fails only its own caller;
  a systemic failure then costs n+1 calls once, and every caller sees the exception of
  its own single call. With `retry_singly=False` every caller gets the batch's error.
- A batch function must return exactly one result per item, in order; otherwise every
  caller of that batch gets an InferenceError.
- Cancellation: a caller that gives up is dropped from its batch if the batch has not
  started yet; a started batch runs to completion and the result is discarded.
- Shutdown: `stop()` refuses new requests, then either drains (finishes everything
  queued and running, within `drain_timeout_s`) or fails every pending caller with
  InferenceError. Nothing is left hanging.
- An `async def` batch function (a remote endpoint) is awaited on the loop instead of
  going to the thread pool; gathering and the policies above are the same.
- Waiting is not running: from `submit()` until its batch starts, a request is recorded
  on its payload's WaitLedger (core.deadlines), so the caller's task time limit does not
  count the time it queued behind other payloads' batches; while its batch runs, the
  payload is credited the other payloads' share of it ((n-k)/n for k of its n items).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Generic, TypeVar

from prometheus_client import Counter, Histogram

from grebe.core.deadlines import WaitLedger, payload_waits, queue_begins, queue_ends
from grebe.errors import InferenceError, ModelUnavailableError

T = TypeVar("T")
R = TypeVar("R")

BATCH_SIZE = Histogram(
    "grebe_inference_batch_size",
    "Items per batched model call.",
    ["batcher"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
BATCH_SECONDS = Histogram(
    "grebe_inference_batch_seconds",
    "Wall time of one batched model call.",
    ["batcher"],
)
BATCH_FAILURES = Counter(
    "grebe_inference_batch_failures_total",
    "Batched model calls that raised.",
    ["batcher"],
)


class BatcherStoppedError(ModelUnavailableError):
    """The batcher was stopped before (or while) this request could run: the model is
    going away (shutdown), not the post's fault."""


class _Request(Generic[T, R]):
    """Queued from creation until its batch starts or it fails (`queue_ends`)."""

    __slots__ = ("future", "item", "ledger", "queued")

    def __init__(self, item: T, future: asyncio.Future[R]) -> None:
        self.item = item
        self.future = future
        self.ledger: WaitLedger | None = payload_waits.get()
        self.queued = False
        queue_begins(self)


def _others_shares(batch: list[_Request[T, R]]) -> list[tuple[WaitLedger, float]]:
    """Each payload ledger in the batch with the share of the batch that is other
    payloads' items: (n - k) / n for k of its n items. A lone payload earns nothing."""
    counts: dict[int, tuple[WaitLedger, int]] = {}
    for request in batch:
        if request.ledger is not None:
            ledger, k = counts.get(id(request.ledger), (request.ledger, 0))
            counts[id(ledger)] = (ledger, k + 1)
    n = len(batch)
    return [(ledger, (n - k) / n) for ledger, k in counts.values() if k < n]


_STOP = object()  # queue sentinel: the collector flushes and exits


class MicroBatcher(Generic[T, R]):
    """Gathers concurrent `submit(item)` calls into `batch_fn(items) -> results` calls."""

    def __init__(
        self,
        batch_fn: Callable[[list[T]], Sequence[R]] | Callable[[list[T]], Awaitable[Sequence[R]]],
        *,
        max_batch_size: int = 32,
        max_wait_ms: float = 2.0,
        max_concurrent_batches: int = 1,
        max_queue: int = 4096,
        executor: Executor | None = None,
        retry_singly: bool = True,
        name: str = "batcher",
    ) -> None:
        if max_batch_size < 1 or max_concurrent_batches < 1 or max_queue < 1:
            raise ValueError("max_batch_size, max_concurrent_batches, max_queue must be >= 1")
        if max_wait_ms < 0:
            raise ValueError("max_wait_ms must be >= 0")
        self._batch_fn = batch_fn
        self._is_async = inspect.iscoroutinefunction(batch_fn)
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_ms / 1000.0
        self.max_concurrent_batches = max_concurrent_batches
        self.max_queue = max_queue
        self.retry_singly = retry_singly
        self.name = name
        self._given_executor = executor
        self._executor: Executor | None = executor
        self._queue: asyncio.Queue[_Request[T, R] | object] | None = None
        self._slots: asyncio.Semaphore | None = None
        self._collector: asyncio.Task[None] | None = None
        self._closed: asyncio.Future[None] | None = None  # set when stop() gives up on waiters
        self._running: set[asyncio.Task[None]] = set()
        self._accepting = False
        self._stopped = False
        # Plain counters for tests and benchmarks (the Prometheus metrics are global).
        self.batches = 0
        self.items = 0

    # -- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        if self._collector is not None:
            return
        self._queue = asyncio.Queue(self.max_queue)
        self._slots = asyncio.Semaphore(self.max_concurrent_batches)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                self.max_concurrent_batches, thread_name_prefix=f"grebe-{self.name}"
            )
        self._accepting = True
        self._stopped = False
        self._closed = asyncio.get_running_loop().create_future()
        self._collector = asyncio.create_task(self._collect(), name=f"{self.name}-collector")

    async def stop(self, *, drain: bool = True, drain_timeout_s: float | None = 30.0) -> None:
        """Refuse new requests; finish (drain) or fail what is pending; release threads."""
        if self._collector is None or self._queue is None:
            return
        self._accepting = False
        if drain:
            try:
                async with asyncio.timeout(drain_timeout_s):
                    await self._queue.put(_STOP)
                    await asyncio.shield(self._collector)
                    if self._running:
                        await asyncio.gather(*self._running, return_exceptions=True)
            except TimeoutError:
                pass  # what is still pending is failed below
        self._collector.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._collector
        self._stopped = True
        assert self._closed is not None
        self._closed.set_result(None)
        self._fail_queued(BatcherStoppedError(f"{self.name}: stopped"))
        for task in list(self._running):
            task.cancel()  # callers get BatcherStoppedError below; the thread finishes alone
        for task in list(self._running):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._given_executor is None and self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        self._collector = None

    def _fail_queued(self, error: Exception) -> None:
        assert self._queue is not None
        while True:
            try:
                request = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            if isinstance(request, _Request):
                queue_ends(request)
                if not request.future.done():
                    request.future.set_exception(error)

    # -- requests ------------------------------------------------------------------

    async def submit(self, item: T) -> R:
        """Queue one item (awaiting while the queue is full) and await its result."""
        if not self._accepting or self._queue is None:
            raise BatcherStoppedError(f"{self.name}: not running")
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        request = _Request(item, future)
        try:
            self._queue.put_nowait(request)
        except asyncio.QueueFull:
            await self._put_when_room(request)
        return await future

    async def _put_when_room(self, request: _Request[T, R]) -> None:
        """Backpressure path: wait for queue space, unless the batcher stops first."""
        assert self._queue is not None and self._closed is not None
        put = asyncio.ensure_future(self._queue.put(request))
        try:
            await asyncio.wait({put, self._closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not put.done():
                put.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await put
        if put.cancelled():
            queue_ends(request)
            raise BatcherStoppedError(f"{self.name}: stopped")
        if self._stopped and not request.future.done():
            # Queued after stop() emptied the queue: nobody else will answer it.
            request.future.set_exception(BatcherStoppedError(f"{self.name}: stopped"))

    async def submit_many(self, items: Sequence[T]) -> list[R]:
        """Submit several items; they may land in different batches. Results in order."""
        return list(await asyncio.gather(*(self.submit(i) for i in items)))

    @property
    def queued(self) -> int:
        return self._queue.qsize() if self._queue is not None else 0

    # -- the collector ---------------------------------------------------------------

    async def _collect(self) -> None:
        batch: list[_Request[T, R]] = []
        try:
            await self._collect_loop(batch)
        except asyncio.CancelledError:
            # Requests already taken off the queue must not be left hanging.
            self._fail(batch, BatcherStoppedError(f"{self.name}: stopped"))
            raise

    async def _collect_loop(self, batch: list[_Request[T, R]]) -> None:
        assert self._queue is not None and self._slots is not None
        loop = asyncio.get_running_loop()
        queue, stopping = self._queue, False
        while not stopping:
            batch.clear()
            first = await queue.get()
            if first is _STOP:
                return
            batch.append(first)  # type: ignore[arg-type]
            deadline = loop.time() + self.max_wait_s
            # Wait for a free slot first: while every slot is busy, requests pile up in
            # the queue and the next batch leaves full instead of as a trickle.
            await self._slots.acquire()
            while len(batch) < self.max_batch_size:
                try:
                    request = queue.get_nowait()
                except asyncio.QueueEmpty:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    try:
                        request = await asyncio.wait_for(queue.get(), remaining)
                    except TimeoutError:
                        break
                if request is _STOP:
                    stopping = True
                    break
                batch.append(request)  # type: ignore[arg-type]
            for request in batch:  # the batch starts: its requests stop waiting
                queue_ends(request)
            live = [r for r in batch if not r.future.done()]  # drop cancelled callers
            batch.clear()
            if not live:
                self._slots.release()
                continue
            task = asyncio.create_task(self._run(live))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _run(self, batch: list[_Request[T, R]]) -> None:
        assert self._slots is not None
        shares = _others_shares(batch)
        for ledger, share in shares:
            ledger.run_begin(share)
        try:
            try:
                results = await self._call([r.item for r in batch])
            except asyncio.CancelledError:
                self._fail(batch, BatcherStoppedError(f"{self.name}: stopped mid-batch"))
                raise
            except Exception as exc:
                if self.retry_singly and len(batch) > 1:
                    await self._run_singly(batch)
                else:
                    self._fail(batch, exc)
                return
            for request, result in zip(batch, results, strict=True):
                if not request.future.done():
                    request.future.set_result(result)
        finally:
            for ledger, share in shares:
                ledger.run_end(share)
            self._slots.release()

    async def _run_singly(self, batch: list[_Request[T, R]]) -> None:
        for request in batch:
            if request.future.done():
                continue
            try:
                (result,) = await self._call([request.item])
            except asyncio.CancelledError:
                self._fail(batch, BatcherStoppedError(f"{self.name}: stopped mid-batch"))
                raise
            except Exception as exc:
                if not request.future.done():
                    request.future.set_exception(exc)
            else:
                if not request.future.done():
                    request.future.set_result(result)

    async def _call(self, items: list[T]) -> Sequence[R]:
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        try:
            if self._is_async:
                results = await self._batch_fn(items)  # type: ignore[misc]
            else:
                results = await loop.run_in_executor(self._executor, self._batch_fn, items)
        except Exception:
            BATCH_FAILURES.labels(self.name).inc()
            raise
        BATCH_SECONDS.labels(self.name).observe(time.perf_counter() - started)
        BATCH_SIZE.labels(self.name).observe(len(items))
        self.batches += 1
        self.items += len(items)
        if len(results) != len(items):
            raise InferenceError(
                f"{self.name}: batch function returned {len(results)} results "
                f"for {len(items)} items"
            )
        return results

    @staticmethod
    def _fail(batch: list[_Request[T, R]], error: BaseException) -> None:
        for request in batch:
            queue_ends(request)
            if not request.future.done():
                request.future.set_exception(error)
