"""Engine processes: run plans on all cores, fed by the dispatcher over batched IPC.

`ProcessExecutor` implements the Executor protocol. It starts N engine processes, each
a fresh interpreter (`python -c "...engine_main()"`, like multiprocessing's "spawn" but
without re-importing the caller's main module, which for the `grebe` script would pull
in the whole CLI): no inherited threads, locks or sockets, and a direct child, so it can
ask the kernel to kill it with its parent. Each engine receives the configuration as its
first frame, builds the configured PlanBundle and runs its PlanMaster on an asyncio loop
(uvloop when installed), up to `engine.concurrency` payloads at once.

IPC is one Unix socket pair per engine carrying length-prefixed msgpack frames. `submit`
only appends to the chosen engine's outbox and schedules one flush for the next loop
iteration, so a burst of submits becomes a few frames of up to ENGINE_IPC_BATCH
payloads; engines return results the same way. Futures live and resolve in the
dispatcher process. A payload goes to the live engine with the fewest in flight.

An engine that dies fails its in-flight futures with EngineDiedError (the dispatcher
retries them as a system fault, until a post has seen so many deaths that it is the
suspect: see Dispatcher) and is restarted.
Restarts never stop: an engine that keeps dying, or a replacement that dies while it
loads its models, is restarted after an exponential backoff (ENGINE_RESTART_BACKOFF_*).
Meanwhile payloads wait parked for the next engine that comes up; an engine outage is a
system fault, so it must never turn into failed attempts of the posts waiting for it.
Engines die with the dispatcher: PR_SET_PDEATHSIG where the kernel has it, and EOF on
the socket everywhere.

`processes: 0` runs plans in the dispatcher's own loop (core.executor.InlineExecutor):
no IPC, for tests, debugging and plans too light to be worth a process.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import itertools
import logging
import os
import signal
import socket
import struct
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from grebe import constants as C
from grebe.core.executor import ExecutorUnavailableError
from grebe.errors import DecodeError, GrebeError, is_system_fault
from grebe.types import TaskPayload, TaskResult

log = logging.getLogger(__name__)

_HEADER = struct.Struct("!I")


class EngineDiedError(GrebeError):
    """The engine process running a payload exited before returning its result."""


class EngineStartError(GrebeError):
    """An engine process could not start (bad plans factory, missing model, ...)."""


# --- the IPC protocol --------------------------------------------------------------------


class Submit(msgspec.Struct, tag="submit", array_like=True):
    items: list[tuple[int, TaskPayload]]


class Results(msgspec.Struct, tag="results", array_like=True):
    items: list[tuple[int, TaskResult]]


class Ready(msgspec.Struct, tag="ready", array_like=True):
    pid: int


class StartFailed(msgspec.Struct, tag="start_failed", array_like=True):
    error: str


class Stop(msgspec.Struct, tag="stop", array_like=True):
    pass


class Configure(msgspec.Struct, tag="configure", array_like=True):
    config_json: str
    index: int
    sys_path: list[str]  # the dispatcher's, so plan factories import the same modules


Frame = Submit | Results | Ready | StartFailed | Stop | Configure

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Frame)


def _frame(message: Frame) -> bytes:
    body = _encoder.encode(message)
    return _HEADER.pack(len(body)) + body


async def _read_frame(reader: asyncio.StreamReader) -> Frame:
    """The next frame; IncompleteReadError when the other side has gone."""
    (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    return _decoder.decode(await reader.readexactly(size))


def tune_gc() -> None:
    """Call once a process has finished starting. Everything alive then (modules, plans,
    models) lives as long as the process: freezing it keeps the collector from walking
    it again on every full collection, and a higher first threshold lets the many
    short-lived objects of a post (structs, futures, tuples) die young in fewer passes.
    Worth about a quarter of the dispatcher's CPU per post in bench/runtime.py."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*C.GC_THRESHOLDS)


# --- the engine process ------------------------------------------------------------------


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL us when the dispatcher dies, even by kill -9."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            pr_set_pdeathsig = 1
            libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent_pid:  # it died before we asked
        os._exit(1)


ENGINE_COMMAND = "from grebe.core.engine import engine_main; engine_main()"


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
    runner(_EngineServer(sock).serve())


class _EngineServer:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._writer: asyncio.StreamWriter | None = None
        self._outbox: list[tuple[int, TaskResult]] = []
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
            first = await _read_frame(reader)
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        if not isinstance(first, Configure):
            raise RuntimeError(f"engine expected a Configure frame, got {type(first).__name__}")
        logging.basicConfig(
            level=logging.INFO,
            format=f"%(asctime)s engine-{first.index} %(levelname)s %(name)s: %(message)s",
        )
        from grebe.security.scrub import install_log_scrubbing

        install_log_scrubbing()
        sys.path[:] = first.sys_path
        from grebe.config import GrebeConfig
        from grebe.core.bundle import build_bundle

        try:
            config = GrebeConfig.model_validate_json(first.config_json)
            self._concurrency = config.engine.concurrency
            bundle = build_bundle(config)
            await bundle.start()
            self._master = bundle.master()
        except Exception as exc:
            log.exception("engine failed to start")
            self._writer.write(_frame(StartFailed(error=f"{type(exc).__name__}: {exc}")))
            with contextlib.suppress(ConnectionError):
                await self._writer.drain()
            return
        tune_gc()
        self._writer.write(_frame(Ready(pid=os.getpid())))
        try:
            while True:
                try:
                    frame = await _read_frame(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    os._exit(1)  # the dispatcher is gone: nobody will take our results
                if isinstance(frame, Stop):
                    break
                if isinstance(frame, Submit):
                    for payload_id, payload in frame.items:
                        self._start(payload_id, payload)
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
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        outbox, self._outbox = self._outbox, []
        if self._writer is None or not outbox:
            return
        for i in range(0, len(outbox), C.ENGINE_IPC_BATCH):
            self._writer.write(_frame(Results(items=outbox[i : i + C.ENGINE_IPC_BATCH])))


# --- the dispatcher side -----------------------------------------------------------------


@dataclass(eq=False)
class _Engine:
    index: int
    process: asyncio.subprocess.Process
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    in_flight: dict[int, asyncio.Future[TaskResult]] = field(default_factory=dict)
    outbox: list[tuple[int, TaskPayload]] = field(default_factory=list)
    alive: bool = True
    pump: asyncio.Task[None] | None = None


class ProcessExecutor:
    """Executor over engine processes (see the module docstring)."""

    def __init__(
        self, config: Any, *, processes: int | None = None,
        on_engine_death: Callable[[int, int | None], None] | None = None,
    ) -> None:
        self._config = config
        self._processes = config.engine.processes if processes is None else processes
        if self._processes < 1:
            raise ValueError(f"ProcessExecutor needs >= 1 process, got {self._processes}")
        self._on_engine_death = on_engine_death
        self._engines: list[_Engine | None] = [None] * self._processes
        self._live: list[_Engine] = []  # the alive ones, for submit()
        self._ids = itertools.count()
        self._flush_scheduled = False
        self._stopping = False
        self._deaths: deque[float] = deque()
        self._restarts: set[asyncio.Task[None]] = set()
        # Payloads submitted while no engine is alive (all restarting): sent to the next
        # one that comes up. Bounded by the dispatcher's in-flight cap.
        self._parked: list[tuple[int, TaskPayload, asyncio.Future[TaskResult]]] = []
        self.failure: str | None = None  # why engines are down, while a restart fails

    @property
    def pids(self) -> list[int]:
        return [e.process.pid for e in self._engines if e is not None and e.alive]

    @property
    def in_flight(self) -> int:
        return sum(len(e.in_flight) for e in self._engines if e is not None) + len(self._parked)

    async def start(self) -> None:
        results = await asyncio.gather(
            *(self._spawn(i) for i in range(self._processes)), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.stop()
            raise errors[0]

    async def _spawn(self, index: int) -> None:
        parent_sock, child_sock = socket.socketpair()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-c", ENGINE_COMMAND, str(child_sock.fileno()), str(os.getpid()),
                pass_fds=[child_sock.fileno()], stdin=asyncio.subprocess.DEVNULL,
            )
        except OSError as exc:
            parent_sock.close()
            raise EngineStartError(f"cannot start engine {index}: {exc}") from exc
        finally:
            child_sock.close()
        reader, writer = await asyncio.open_unix_connection(sock=parent_sock)
        writer.write(
            _frame(Configure(self._config.model_dump_json(), index, list(sys.path)))
        )
        try:
            async with asyncio.timeout(C.ENGINE_START_TIMEOUT_S):
                first = await _read_frame(reader)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError) as exc:
            writer.close()
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            code = await process.wait()
            raise EngineStartError(
                f"engine {index} did not start (exit code {code}): {exc!r}"
            ) from exc
        except asyncio.CancelledError:  # stop() during a start: leave no engine behind
            writer.close()
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            raise
        if isinstance(first, StartFailed):
            writer.close()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await process.wait()
            raise EngineStartError(f"engine {index} failed to start: {first.error}")
        engine = _Engine(index=index, process=process, reader=reader, writer=writer)
        engine.pump = asyncio.create_task(self._pump(engine), name=f"engine-{index}-results")
        self._engines[index] = engine
        self._live = [e for e in self._engines if e is not None and e.alive]
        log.info("engine %d started (pid %s)", index, process.pid)
        if self._parked:
            parked, self._parked = self._parked, []
            for payload_id, payload, future in parked:
                if not future.done():
                    self._assign(engine, payload_id, payload, future)

    def submit(self, payload: TaskPayload) -> asyncio.Future[TaskResult]:
        if self._stopping:
            raise ExecutorUnavailableError("ProcessExecutor is stopping")
        future: asyncio.Future[TaskResult] = asyncio.get_running_loop().create_future()
        payload_id = next(self._ids)
        best: _Engine | None = None
        fewest = sys.maxsize
        for engine in self._live:
            if len(engine.in_flight) < fewest:
                best, fewest = engine, len(engine.in_flight)
        if best is not None:
            self._assign(best, payload_id, payload, future)
        else:
            self._parked.append((payload_id, payload, future))
        return future

    def _assign(
        self, engine: _Engine, payload_id: int, payload: TaskPayload,
        future: asyncio.Future[TaskResult],
    ) -> None:
        engine.in_flight[payload_id] = future
        engine.outbox.append((payload_id, payload))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        for engine in self._engines:
            if engine is None or not engine.outbox:
                continue
            outbox, engine.outbox = engine.outbox, []
            if not engine.alive:
                continue  # its futures were failed with it
            for i in range(0, len(outbox), C.ENGINE_IPC_BATCH):
                self._send(engine, outbox[i : i + C.ENGINE_IPC_BATCH])

    def _send(self, engine: _Engine, items: list[tuple[int, TaskPayload]]) -> None:
        """Write one Submit frame. The codec bounds what a payload may hold, so encoding
        does not fail; if it ever does, only the payload that cannot be encoded fails
        (its post is dead-lettered with the reason), never the batch around it."""
        try:
            engine.writer.write(_frame(Submit(items=items)))
            return
        except (TypeError, ValueError, OverflowError, RecursionError):
            pass
        sendable: list[tuple[int, TaskPayload]] = []
        for payload_id, payload in items:
            try:
                _encoder.encode(payload)
            except (TypeError, ValueError, OverflowError, RecursionError) as exc:
                future = engine.in_flight.pop(payload_id, None)
                if future is not None and not future.done():
                    future.set_exception(
                        DecodeError(f"unencodable: {type(exc).__name__}: {exc}")
                    )
            else:
                sendable.append((payload_id, payload))
        if sendable:
            engine.writer.write(_frame(Submit(items=sendable)))

    async def _pump(self, engine: _Engine) -> None:
        """Resolve futures from the engine's result frames until it goes away."""
        try:
            while True:
                frame = await _read_frame(engine.reader)
                if isinstance(frame, Results):
                    for payload_id, result in frame.items:
                        future = engine.in_flight.pop(payload_id, None)
                        if future is not None and not future.done():
                            future.set_result(result)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except Exception:
            log.exception("engine %d sent an unreadable frame", engine.index)
        await self._lost(engine)

    async def _lost(self, engine: _Engine) -> None:
        engine.alive = False
        self._live = [e for e in self._live if e is not engine]
        engine.writer.close()
        # Nothing can come back on a closed socket: fail its payloads now, so they are
        # retried on the other engines while this one is reaped and replaced.
        error = EngineDiedError(f"engine {engine.index} went away with the payload")
        in_flight, engine.in_flight = engine.in_flight, {}
        for future in in_flight.values():
            if not future.done():
                future.set_exception(error)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(5):
                code: int | None = await engine.process.wait()
        except TimeoutError:  # it closed the socket but lives on: it is no use to us
            with contextlib.suppress(ProcessLookupError):
                engine.process.kill()
            code = await engine.process.wait()
        if self._stopping:
            return
        log.error("engine %d died (exit code %s); %d payloads failed", engine.index, code,
                  len(in_flight))
        if self._on_engine_death is not None:
            self._on_engine_death(engine.index, code)
        now = loop.time()
        self._deaths.append(now)
        while self._deaths and self._deaths[0] < now - C.ENGINE_RESTART_WINDOW_S:
            self._deaths.popleft()
        restart = asyncio.create_task(self._restart(engine.index, len(self._deaths)))
        self._restarts.add(restart)
        restart.add_done_callback(self._restarts.discard)

    async def _restart(self, index: int, recent_deaths: int) -> None:
        """Bring engine `index` back, however often it takes: the first restart of a
        quiet spell is immediate, then each death or failed start in the window doubles
        the wait (up to ENGINE_RESTART_BACKOFF_MAX_S), so a crash loop costs little CPU
        and posts wait parked instead of being failed."""
        failures = max(0, recent_deaths - 1)
        while not self._stopping:
            if failures:
                delay = min(
                    C.ENGINE_RESTART_BACKOFF_MAX_S,
                    C.ENGINE_RESTART_BACKOFF_BASE_S * 2.0 ** min(failures - 1, 30),
                )
                log.warning("restarting engine %d in %.1fs", index, delay)
                await asyncio.sleep(delay)
            try:
                await self._spawn(index)
            except EngineStartError as exc:
                failures += 1
                self.failure = str(exc)
                log.error("engine %d restart failed (%s); retrying", index, exc)
                continue
            if not self._parked and len(self._live) == self._processes:
                self.failure = None
            return

    async def stop(self, timeout_s: float = C.ENGINE_STOP_TIMEOUT_S) -> None:
        """Stop every engine: payloads still running are abandoned (their futures are
        cancelled) and will be redelivered by the broker. Engines get `timeout_s` in all
        (not each) to stop cleanly; the ones still running then are killed."""
        self._stopping = True
        for task in list(self._restarts):
            task.cancel()
        engines = [e for e in self._engines if e is not None]
        for engine in engines:
            if engine.alive:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    engine.writer.write(_frame(Stop()))
        waits = [asyncio.ensure_future(e.process.wait()) for e in engines]
        if waits:
            await asyncio.wait(waits, timeout=max(0.0, timeout_s))
        for engine, wait in zip(engines, waits, strict=True):
            if not wait.done():
                log.warning("engine %d did not stop in %.1fs; killing it", engine.index,
                            timeout_s)
                with contextlib.suppress(ProcessLookupError):
                    engine.process.kill()
                await wait
            if engine.pump is not None:
                engine.pump.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await engine.pump
            engine.alive = False
            self._live = []
            engine.writer.close()
            for future in engine.in_flight.values():
                future.cancel()
            engine.in_flight.clear()
        for _, _, future in self._parked:
            future.cancel()
        self._parked = []
        self._engines = [None] * self._processes

