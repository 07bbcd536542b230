"""An engine process: receives a BundleRecipe, builds its plans, runs payloads.

A fresh interpreter started by grebe.core.engine.ProcessExecutor (`python -c
ENGINE_COMMAND FD PARENT_PID`). Its first frame names the builder ("module:function")
and the argument to call it with; the builder (grebe.app.engines for `grebe run`) returns
the PlanBundle, and its PlanMaster then runs up to `concurrency` payloads at once on an
asyncio loop (uvloop when installed). Results go back in batches, one flush per loop
iteration.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from grebe import constants as C
from grebe.core.bundle import PlanBundle, import_callable
from grebe.core.engine_ipc import (
    Configure,
    Ready,
    Results,
    Share,
    StartFailed,
    Stop,
    Submit,
    pack_frame,
    read_frame,
)
from grebe.core.stall_watch import watched
from grebe.errors import is_system_fault
from grebe.types import TaskPayload, TaskResult

log = logging.getLogger(__name__)


def tune_gc(thresholds: tuple[int, int, int] = C.GC_THRESHOLDS) -> None:
    """Call once a process has finished starting. Everything alive then (modules, plans,
    models) lives as long as the process: freezing it keeps the collector from walking
    it again on every full collection, and a higher first threshold lets the many
    short-lived objects of a post (structs, futures, tuples) die young in fewer passes.
    Worth about a quarter of the dispatcher's CPU per post in bench/runtime.py."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)


def tune_engine() -> None:
    """An engine process, once started: `tune_gc` with the engine's thresholds (it holds
    hundreds of posts in flight, which every young collection walks)."""
    tune_gc(C.ENGINE_GC_THRESHOLDS)


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL us when the dispatcher dies, even by kill -9."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            pr_set_pdeathsig = 1
            libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent_pid:  # it died before we asked
        os._exit(1)


ENGINE_COMMAND = "from grebe.core.engine_process import engine_main; engine_main()"


def engine_main() -> None:
    """Entry point of an engine process: `python -c ENGINE_COMMAND FD PARENT_PID`."""
    fd, parent_pid = int(sys.argv[1]), int(sys.argv[2])
    _die_with_parent(parent_pid)
    # The supervisor decides when engines stop (a Stop frame after the drain); a Ctrl-C
    # or a SIGTERM sent to the whole process group must not kill work mid-drain.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    try:
        import uvloop

        runner: Callable[[Any], Any] = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(watched(_EngineServer(sock).serve()))


class _EngineServer:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._writer: asyncio.StreamWriter | None = None
        self._outbox: list[tuple[int, TaskResult]] = []
        self._shares: list[tuple[str, bytes]] = []  # observations for the other engines
        self._flush_scheduled = False
        self._running: set[asyncio.Task[None]] = set()
        # Payloads past the concurrency limit wait here (a counter and a deque cost less
        # per payload than a contended asyncio.Semaphore).
        self._waiting: deque[tuple[int, TaskPayload]] = deque()
        self._concurrency = 1
        self._master: Any = None

    async def serve(self) -> None:
        reader, self._writer = await asyncio.open_unix_connection(sock=self._sock)
        try:
            first = await read_frame(reader)
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        if not isinstance(first, Configure):
            raise RuntimeError(f"engine expected a Configure frame, got {type(first).__name__}")
        logging.basicConfig(
            level=logging.INFO,
            format=f"%(asctime)s engine-{first.index} %(levelname)s %(name)s: %(message)s",
        )
        sys.path[:] = first.sys_path
        self._concurrency = first.concurrency
        try:
            # The recipe's builder is the wiring (grebe.app.engines for `grebe run`): it
            # is imported here, in the engine, by name, so core never imports it.
            bundle = import_callable(first.builder, "engine bundle builder")(first.argument)
            if not isinstance(bundle, PlanBundle):
                raise TypeError(
                    f"{first.builder} returned {type(bundle).__name__}, not a PlanBundle"
                )
            if first.engines > 1:
                bundle.peers.attach(self._share)
            await bundle.start()
            self._master = bundle.master()
        except Exception as exc:
            log.exception("engine failed to start")
            self._writer.write(pack_frame(StartFailed(error=f"{type(exc).__name__}: {exc}")))
            with contextlib.suppress(ConnectionError):
                await self._writer.drain()
            return
        tune_engine()
        self._writer.write(pack_frame(Ready(pid=os.getpid())))
        try:
            while True:
                try:
                    frame = await read_frame(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    os._exit(1)  # the dispatcher is gone: nobody will take our results
                if isinstance(frame, Stop):
                    break
                if isinstance(frame, Submit):
                    for payload_id, payload in frame.items:
                        self._start(payload_id, payload)
                elif isinstance(frame, Share):
                    for channel, data in frame.items:
                        bundle.peers.deliver(channel, data)
        finally:
            self._waiting.clear()
            for task in list(self._running):
                task.cancel()
            await asyncio.gather(*self._running, return_exceptions=True)
            self._flush()
            with contextlib.suppress(ConnectionError):
                await self._writer.drain()
            await bundle.stop()

    def _start(self, payload_id: int, payload: TaskPayload) -> None:
        if len(self._running) >= self._concurrency:
            self._waiting.append((payload_id, payload))
            return
        task = asyncio.create_task(self._run(payload_id, payload))
        self._running.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if self._waiting:
            self._start(*self._waiting.popleft())

    async def _run(self, payload_id: int, payload: TaskPayload) -> None:
        try:
            result = await self._master.run(payload)
        except Exception as exc:  # a PlanMaster bug must not take the engine down
            log.exception("payload %s failed outside its plans", payload.payload_id)
            now = time.time()
            result = TaskResult(
                payload_id=payload.payload_id, post_id=payload.post.id, success=False,
                error=f"{type(exc).__name__}: {exc}", system_fault=is_system_fault(exc),
                started_at=now, finished_at=now,
            )
        self._outbox.append((payload_id, result))
        self._schedule_flush()

    def _share(self, channel: str, data: bytes) -> None:
        """An observation of this engine's state for the others (grebe.core.peers)."""
        self._shares.append((channel, data))
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._writer is None:
            return
        if self._shares:  # before the results, so a post's observations are relayed first
            shares, self._shares = self._shares, []
            for i in range(0, len(shares), C.ENGINE_IPC_BATCH):
                self._writer.write(pack_frame(Share(items=shares[i : i + C.ENGINE_IPC_BATCH])))
        outbox, self._outbox = self._outbox, []
        if not outbox:
            return
        for i in range(0, len(outbox), C.ENGINE_IPC_BATCH):
            self._writer.write(pack_frame(Results(items=outbox[i : i + C.ENGINE_IPC_BATCH])))
