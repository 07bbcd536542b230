"""Where the dispatcher hands payloads: the Executor protocol and the in-process one.

`submit` returns a future rather than a coroutine so the dispatcher needs no asyncio.Task
per message: an in-process executor resolves it from a worker, a process pool resolves
it when the result comes back over IPC.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol, runtime_checkable

from grebe.errors import SystemFault
from grebe.types import TaskPayload, TaskResult

log = logging.getLogger(__name__)


class ExecutorUnavailableError(SystemFault):
    """The executor cannot take a payload now (not started, stopped, full, or no engine
    is up): a system fault, so the post is retried later and never dead-lettered for it."""


@runtime_checkable
class Executor(Protocol):
    def submit(self, payload: TaskPayload) -> asyncio.Future[TaskResult]:
        """Start `payload`; the future resolves to its result or to the error it raised."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@runtime_checkable
class ReportsEngines(Protocol):
    """An executor that runs plans in engine processes and can say which are alive and why
    they are down (the status page, readyz); an in-process executor has neither."""

    @property
    def pids(self) -> list[int]: ...

    #: Why the engines are down while a restart keeps failing; None while they are up.
    failure: str | None


class Runner(Protocol):
    """Anything that runs one payload to a result: a PlanMaster."""

    async def run(self, payload: TaskPayload) -> TaskResult: ...


class InlineExecutor:
    """Runs payloads in this event loop with at most `concurrency` running at once.

    A fixed set of worker coroutines pull from a queue, so no task is created per payload.
    The queue is bounded by the dispatcher's in-flight cap (it submits only what holds a
    slot), and `max_queued` is a second, hard bound against a misbehaving caller."""

    def __init__(self, runner: Runner, concurrency: int = 64, *, max_queued: int = 1 << 20):
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self._runner = runner
        self._concurrency = concurrency
        self._max_queued = max_queued
        self._queue: asyncio.Queue[tuple[TaskPayload, asyncio.Future[TaskResult]]] | None = None
        self._workers: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        if self._workers:
            return
        self._queue = asyncio.Queue(self._max_queued)
        self._workers = [
            asyncio.create_task(self._work(self._queue), name=f"inline-executor-{i}")
            for i in range(self._concurrency)
        ]

    async def stop(self) -> None:
        """Cancel running payloads; futures not yet resolved are cancelled."""
        workers, self._workers = self._workers, []
        for worker in workers:
            worker.cancel()
        for worker in workers:
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        queue, self._queue = self._queue, None
        while queue is not None and not queue.empty():
            _, future = queue.get_nowait()
            future.cancel()

    def submit(self, payload: TaskPayload) -> asyncio.Future[TaskResult]:
        if self._queue is None:
            raise ExecutorUnavailableError("InlineExecutor.submit() before start() or after stop()")
        future: asyncio.Future[TaskResult] = asyncio.get_running_loop().create_future()
        try:
            self._queue.put_nowait((payload, future))
        except asyncio.QueueFull:
            raise ExecutorUnavailableError(
                f"InlineExecutor queue is full ({self._max_queued} payloads waiting)"
            ) from None
        return future

    async def _work(
        self, queue: asyncio.Queue[tuple[TaskPayload, asyncio.Future[TaskResult]]]
    ) -> None:
        while True:
            payload, future = await queue.get()
            if future.done():  # cancelled by the caller while queued
                continue
            try:
                result = await self._runner.run(payload)
            except asyncio.CancelledError:
                future.cancel()
                raise
            except Exception as exc:  # the runner's failure is the payload's failure
                if not future.done():
                    future.set_exception(exc)
            else:
                if not future.done():
                    future.set_result(result)
