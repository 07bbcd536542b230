"""Engine processes: run plans on all cores, fed by the dispatcher over batched IPC.

`ProcessExecutor` implements the Executor protocol. It starts N engine processes, each
a fresh interpreter (`python -c "...engine_main()"`, like multiprocessing's "spawn" but
without re-importing the caller's main module, which for the `grebe` script would pull
in the whole CLI): no inherited threads, locks or sockets, and a direct child, so it can
ask the kernel to kill it with its parent. Each engine receives a BundleRecipe as its
first frame (a builder's "module:function" and its argument: grebe.app passes the config
as JSON), builds the PlanBundle and runs its PlanMaster (grebe.core.engine_process), up
to `concurrency` payloads at once.

IPC is one Unix socket pair per engine carrying length-prefixed msgpack frames
(grebe.core.engine_ipc). `submit`
only appends to the chosen engine's outbox and schedules one flush for the next loop
iteration, so a burst of submits becomes a few frames of up to ENGINE_IPC_BATCH
payloads; engines return results the same way. Futures live and resolve in the
dispatcher process.

A payload goes to the engine its post's author hashes to (CRC-32 of the author id, or of
the post id while the author is unknown, modulo N): state an engine keeps per author
(grebe.flows.author_memory) then sees all of that author's posts. While that engine is
down, its payloads go to the live engine with the fewest in flight instead. State that
spans authors is kept whole by Share frames, which the dispatcher relays from each
engine to the others (grebe.core.peers).

Engine 0 starts first, alone on the cores, and `start()` returns when it is up: the
first annotation comes as soon as with one engine. The others start after it, in the
background; until an engine's first start, the payloads of its authors wait for it
(and go to the live engines if that start fails), and the other engines' Share frames
are held for it, so it starts knowing what they saw meanwhile.

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
import itertools
import logging
import os
import socket
import sys
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from grebe import constants as C
from grebe.core.engine_ipc import (
    Configure,
    Results,
    Share,
    StartFailed,
    Stop,
    Submit,
    encoder,
    pack_frame,
    read_frame,
)
from grebe.core.engine_process import ENGINE_COMMAND
from grebe.core.engine_start import EngineStartTimeout, await_while_progressing
from grebe.core.executor import ExecutorUnavailableError
from grebe.core.settings import BundleRecipe, EngineSettings
from grebe.core.spawn import DEVNULL, Child, spawn
from grebe.errors import DecodeError, GrebeError
from grebe.types import TaskPayload, TaskResult

log = logging.getLogger(__name__)


class EngineDiedError(GrebeError):
    """The engine process running a payload exited before returning its result."""


class EngineStartError(GrebeError):
    """An engine process could not start (bad plans factory, missing model, ...)."""


@dataclass(eq=False)
class _Engine:
    index: int
    process: Child
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    in_flight: dict[int, asyncio.Future[TaskResult]] = field(default_factory=dict)
    outbox: list[tuple[int, TaskPayload]] = field(default_factory=list)
    alive: bool = True
    pump: asyncio.Task[None] | None = None


class ProcessExecutor:
    """Executor over engine processes (see the module docstring)."""

    def __init__(
        self, settings: EngineSettings, recipe: BundleRecipe, *, processes: int | None = None,
        on_engine_death: Callable[[int, int | None], None] | None = None,
    ) -> None:
        self._settings = settings
        self._recipe = recipe
        self._processes = settings.processes if processes is None else processes
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
        # Engines not yet up for the first time, and the payloads of their authors.
        self._unstarted: set[int] = set()
        self._waiting: dict[int, list[tuple[int, TaskPayload, asyncio.Future[TaskResult]]]] = {}
        self._later: asyncio.Task[None] | None = None
        self._held: dict[int, deque[bytes]] = {}  # Share frames for the unstarted engines
        self.failure: str | None = None  # why engines are down, while a restart fails

    @property
    def pids(self) -> list[int]:
        return [e.process.pid for e in self._engines if e is not None and e.alive]

    @property
    def in_flight(self) -> int:
        return (sum(len(e.in_flight) for e in self._engines if e is not None)
                + len(self._parked) + sum(len(w) for w in self._waiting.values()))

    async def start(self) -> None:
        """Start engine 0 and return once it is up; the others start after it (see the
        module docstring). A failed start of engine 0 fails this call."""
        self._unstarted = set(range(1, self._processes))
        self._held = {i: deque(maxlen=C.ENGINE_HELD_SHARE_FRAMES) for i in self._unstarted}
        try:
            await self._spawn(0)
        except BaseException:
            await self.stop()
            raise
        if self._unstarted:
            self._later = asyncio.create_task(self._start_later(), name="engines-after-0")

    async def _start_later(self) -> None:
        later = sorted(self._unstarted)
        results = await asyncio.gather(*(self._spawn(i) for i in later), return_exceptions=True)
        for index, result in zip(later, results, strict=True):
            if not isinstance(result, BaseException):
                continue
            self.failure = str(result)
            log.error("engine %d did not start (%s); retrying", index, result)
            self._unstarted.discard(index)
            self._held.pop(index, None)
            for payload_id, payload, future in self._waiting.pop(index, []):
                if not future.done():
                    self._place(payload_id, payload, future)
            restart = asyncio.create_task(self._restart(index, 1))
            self._restarts.add(restart)
            restart.add_done_callback(self._restarts.discard)

    async def _spawn(self, index: int) -> None:
        parent_sock, child_sock = socket.socketpair()
        try:
            process = await spawn(
                sys.executable, "-c", ENGINE_COMMAND, str(child_sock.fileno()), str(os.getpid()),
                pass_fds=[child_sock.fileno()], stdin=DEVNULL,
            )
        except OSError as exc:
            parent_sock.close()
            raise EngineStartError(f"cannot start engine {index}: {exc}") from exc
        finally:
            child_sock.close()
        reader, writer = await asyncio.open_unix_connection(sock=parent_sock)
        recipe = self._recipe
        writer.write(pack_frame(Configure(
            recipe.builder, recipe.argument, self._settings.concurrency, index, list(sys.path),
            self._processes,
        )))
        try:
            first = await await_while_progressing(
                read_frame(reader), process.pid, stall_s=self._settings.start_stall_s,
                limit_s=self._settings.start_timeout_s)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError) as exc:
            writer.close()
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            code = await process.wait()
            why = str(exc) if isinstance(exc, EngineStartTimeout) else repr(exc)
            raise EngineStartError(
                f"engine {index} did not start (exit code {code}): {why}"
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
        self._unstarted.discard(index)
        for frame in self._held.pop(index, ()):  # ahead of any payload: frames keep order
            writer.write(frame)
        for payload_id, payload, future in self._waiting.pop(index, []):
            if not future.done():
                self._assign(engine, payload_id, payload, future)
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
        index = self._owner(payload)
        owner = self._engines[index]
        if owner is not None and owner.alive:
            self._assign(owner, payload_id, payload, future)
        elif index in self._unstarted:
            self._waiting.setdefault(index, []).append((payload_id, payload, future))
        else:
            self._place(payload_id, payload, future)
        return future

    def _owner(self, payload: TaskPayload) -> int:
        """The engine this payload's author hashes to (see the module docstring)."""
        if self._processes == 1:
            return 0
        post = payload.post
        return zlib.crc32((post.author_id or post.id).encode()) % self._processes

    def _place(self, payload_id: int, payload: TaskPayload,
               future: asyncio.Future[TaskResult]) -> None:
        """A payload whose engine is down: to the live engine with the fewest in flight,
        or parked for the next one up."""
        best: _Engine | None = None
        fewest = sys.maxsize
        for engine in self._live:
            if len(engine.in_flight) < fewest:
                best, fewest = engine, len(engine.in_flight)
        if best is not None:
            self._assign(best, payload_id, payload, future)
        else:
            self._parked.append((payload_id, payload, future))

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
            engine.writer.write(pack_frame(Submit(items=items)))
            return
        except (TypeError, ValueError, OverflowError, RecursionError):
            pass
        sendable: list[tuple[int, TaskPayload]] = []
        for payload_id, payload in items:
            try:
                encoder.encode(payload)
            except (TypeError, ValueError, OverflowError, RecursionError) as exc:
                future = engine.in_flight.pop(payload_id, None)
                if future is not None and not future.done():
                    future.set_exception(
                        DecodeError(f"unencodable: {type(exc).__name__}: {exc}")
                    )
            else:
                sendable.append((payload_id, payload))
        if sendable:
            engine.writer.write(pack_frame(Submit(items=sendable)))

    async def _pump(self, engine: _Engine) -> None:
        """Resolve futures from the engine's result frames until it goes away."""
        try:
            while True:
                frame = await read_frame(engine.reader)
                if isinstance(frame, Results):
                    for payload_id, result in frame.items:
                        future = engine.in_flight.pop(payload_id, None)
                        if future is not None and not future.done():
                            future.set_result(result)
                elif isinstance(frame, Share):
                    self._relay(engine, frame)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except Exception:
            log.exception("engine %d sent an unreadable frame", engine.index)
        await self._lost(engine)

    def _relay(self, sender: _Engine, frame: Share) -> None:
        """Pass an engine's observations on to every other live engine, and hold them
        for the engines not yet started. One that is restarting misses them: it starts
        with empty cross-author state, as a lone engine does after a restart."""
        data = pack_frame(frame)
        for engine in self._live:
            if engine is not sender:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    engine.writer.write(data)
        for held in self._held.values():
            held.append(data)

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
        if self._later is not None:
            self._later.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._later
        for task in list(self._restarts):
            task.cancel()
        engines = [e for e in self._engines if e is not None]
        for engine in engines:
            if engine.alive:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    engine.writer.write(pack_frame(Stop()))
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
        waiting = [item for items in self._waiting.values() for item in items]
        for _, _, future in self._parked + waiting:
            future.cancel()
        self._parked = []
        self._waiting = {}
        self._unstarted = set()
        self._held = {}
        self._engines = [None] * self._processes
