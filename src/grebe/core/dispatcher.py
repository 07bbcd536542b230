"""The dispatcher owns delivery: from sources to the executor and back to an ack.

One intake loop picks a stream by weight, takes its QPS budget and free in-flight slots,
polls a batch, decodes it and submits every payload. Results come back as resolved
futures whose done-callbacks queue them; one completer coroutine drains that queue and
acks, retries (after a jittered backoff) or dead-letters each message. No asyncio.Task is
created per message, and nothing waits by sleep-polling: the loop blocks on free slots,
on a source's poll, or until the exact moment a QPS window frees a slot.

A message holds its in-flight slot until it is finished (acked done or dead-lettered),
including while it waits for a retry, so `max_in_flight` bounds everything in memory.

Failures are classified (grebe.errors.is_system_fault). A post's own failure is retried
up to `max_attempts`, then dead-lettered. A system fault (no engine up, store or disk or
model server down) is not the post's: it costs no attempt, is never dead-lettered, and
pauses intake with a growing backoff until a post succeeds again, so an outage holds the
backlog in the broker (offsets uncommitted) instead of draining it into dead letters.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import msgspec
from limits import RateLimitItem, RateLimitItemPerSecond
from limits.aio.strategies import MovingWindowRateLimiter
from limits.storage import storage_from_string

from grebe import constants as C
from grebe.codec import decode_envelope, encode
from grebe.config import DispatcherConfig, StreamConfig
from grebe.core.backoff import Backoff
from grebe.core.engine import EngineDiedError
from grebe.core.executor import Executor
from grebe.core.metrics import DispatcherMetrics, NullMetrics
from grebe.core.source import Message, Outcome, ReportsLag, Source
from grebe.errors import ConfigError, DecodeError, is_system_fault
from grebe.types import DeadLetter, TaskPayload, TaskResult, UserContext

log = logging.getLogger(__name__)

RATE_LIMIT_NAMESPACE = "grebe-stream-qps"  # key prefix in the (possibly shared) limiter store
MIN_THROTTLE_S = 0.001  # a throttled stream waits at least this, whatever the store says
_EMPTY_CONTEXT = UserContext()


@dataclass(frozen=True)
class Stream:
    """A Source bound to its StreamConfig (weight, QPS, eligibilities, deadline)."""

    source: Source
    config: StreamConfig


@dataclass
class DispatcherStats:
    received: int = 0
    done: int = 0
    retried: int = 0
    dead: int = 0
    poll_errors: int = 0
    ack_errors: int = 0
    system_faults: int = 0  # failures of the system, retried without counting an attempt


def qps_item(max_qps: float) -> RateLimitItem:
    """A moving-window limit equal to `max_qps`: `amount` per `multiples` seconds, both
    integers as the limits library wants (2.5 qps -> 5 per 2 s)."""
    if max_qps >= 1:
        ratio = Fraction(max_qps).limit_denominator(60)
        return RateLimitItemPerSecond(ratio.numerator, ratio.denominator)
    return RateLimitItemPerSecond(1, max(1, round(1 / max_qps)))


def limiter_storage_from(uri: str, namespace: str = C.DEFAULT_REDIS_NAMESPACE) -> object:
    """`memory://` or `redis://host/db` (as configured) -> an async limits storage. In
    Redis its keys start with `<namespace>:limits`, so deployments sharing a Redis keep
    separate budgets."""
    scheme = uri.split("://", 1)[0]
    if not scheme.startswith("async+"):
        uri = f"async+{uri}"
    if "redis" in scheme:  # redis-py is a dependency; coredis (the limits default) is not
        return storage_from_string(
            uri, implementation="redispy", key_prefix=f"{namespace}:{C.REDIS_LIMITS_SUFFIX}"
        )
    return storage_from_string(uri)


class _InFlightSlots:
    """A counting semaphore that hands out as many free slots as a batch can use.

    Slots taken for a poll are `reserved`; each message the poll hands out `claim`s one
    as it becomes an entry, and `settle` gives back what was not claimed. Claiming per
    message (not counting after the poll) keeps the count right when a poll fails half
    way: the entries already made hold their slots, the rest are returned."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0  # held by messages, or reserved for a poll under way
        self.reserved = 0
        self._freed = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()

    async def acquire(self, most: int, stopping: asyncio.Event) -> int:
        """Wait for at least one free slot and take up to `most`; 0 once `stopping`."""
        while self.used >= self.capacity and not stopping.is_set():
            self._freed.clear()
            await self._freed.wait()
        if stopping.is_set():
            return 0
        n = min(most, self.capacity - self.used)
        self.used += n
        self.reserved += n
        self.idle.clear()
        return n

    def claim(self, reservation: _Reservation) -> None:
        """One reserved slot now belongs to a message (until its `release`)."""
        if reservation.left <= 0:
            raise RuntimeError("a poll handed out more messages than it reserved slots for")
        reservation.left -= 1
        self.reserved -= 1

    def settle(self, reservation: _Reservation) -> None:
        """The poll is over: give back the slots it reserved and did not claim."""
        left, reservation.left = reservation.left, 0
        self.reserved -= left
        self.release(left)

    def release(self, n: int = 1) -> None:
        if n:
            self.used -= n
            self._freed.set()
        if self.used == 0:
            self.idle.set()

    def wake(self) -> None:
        self._freed.set()


class _Reservation:
    """The slots one intake round reserved and has not yet given to messages."""

    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


class _StreamState:
    __slots__ = (
        "deadline_s", "eligibilities", "empty_round", "errors", "has_lag", "limit", "mode",
        "name", "next_lag_at", "ready_at", "source", "unreported_done", "weight",
    )

    def __init__(self, stream: Stream) -> None:
        self.source = stream.source
        self.name = stream.config.name
        self.weight = stream.config.weight
        self.eligibilities = frozenset(stream.config.eligibilities)
        self.mode = str(stream.config.selection.mode)  # what plans read as payload.mode
        self.deadline_s = stream.config.deadline_s
        self.limit = qps_item(stream.config.max_qps) if stream.config.max_qps else None
        self.ready_at = 0.0  # epoch seconds; later while its QPS budget or an error holds it
        self.empty_round = -2  # the round its last poll came back empty, or -2
        self.errors = 0
        self.has_lag = isinstance(stream.source, ReportsLag)
        self.next_lag_at = 0.0
        self.unreported_done = 0  # acked since the completer last told the metrics


class _Entry:
    """One message from poll to ack. Being callable, it is its future's done-callback."""

    __slots__ = (
        "attempt", "dispatcher", "engine_deaths", "last_error", "message", "payload",
        "settled", "stream", "system_faults",
    )

    def __init__(
        self, dispatcher: Dispatcher, stream: _StreamState, message: Message,
        payload: TaskPayload | None,
    ) -> None:
        self.dispatcher = dispatcher
        self.stream = stream
        self.message = message
        self.payload = payload  # None: the message could not be decoded
        self.attempt = message.attempt
        self.last_error: str | None = None
        self.settled = False  # its in-flight slot was given back
        self.system_faults = 0  # system faults in a row (they cost no attempt)
        self.engine_deaths = 0  # engines that died while running it

    def __call__(self, future: asyncio.Future[TaskResult] | BaseException | None) -> None:
        self.dispatcher._finish(self, future)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class Dispatcher:
    """Multiplexes streams into an executor, with delivery guarantees (see module doc).

    The caller starts and stops the sources and the executor; the dispatcher only uses
    them between `run()` and `stop()`."""

    def __init__(
        self,
        streams: Sequence[Stream],
        executor: Executor,
        config: DispatcherConfig,
        *,
        metrics: DispatcherMetrics | None = None,
        rng: random.Random | None = None,
        limiter_storage: str = "memory://",
        limiter_namespace: str = C.DEFAULT_REDIS_NAMESPACE,
    ) -> None:
        if not streams:
            raise ConfigError("the dispatcher needs at least one stream")
        names = [s.config.name for s in streams]
        if len(set(names)) != len(names):
            raise ConfigError(f"stream names must be unique, got {names}")
        self._streams = [_StreamState(s) for s in streams]
        self._executor = executor
        self._config = config
        self._metrics: DispatcherMetrics = metrics or NullMetrics()
        self._rng = rng or random.Random()
        self._backoff = Backoff(config.backoff_base_s, config.backoff_max_s, self._rng)
        self._limiter_storage = limiter_storage
        self._limiter_namespace = limiter_namespace
        self._limiter: MovingWindowRateLimiter | None = None
        self.stats = DispatcherStats()
        self._slots = _InFlightSlots(config.max_in_flight)
        self._finished: deque[tuple[_Entry, object]] = deque()
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._closed = False
        self._done = asyncio.Event()  # set once stop() has closed the dispatcher
        self._intake_exited = asyncio.Event()
        self._retries: dict[_Entry, asyncio.TimerHandle] = {}
        self._running = False
        self._completer: asyncio.Task[None] | None = None
        self._paused_until = 0.0  # epoch seconds: intake waits while a system fault lasts
        self._resumed = asyncio.Event()  # a success (or stop) ends the pause early

    @property
    def in_flight(self) -> int:
        """Messages held: running, or waiting for their retry or their ack."""
        return self._slots.used - self._slots.reserved

    # --- lifecycle ---------------------------------------------------------------

    async def run(self) -> None:
        """Dispatch until `stop()`; returns once stop() has drained (or given up)."""
        if self._running:
            raise RuntimeError("Dispatcher.run() is already running")
        self._running = True
        if any(s.limit for s in self._streams):
            self._limiter = MovingWindowRateLimiter(
                limiter_storage_from(  # type: ignore[arg-type]
                    self._limiter_storage, self._limiter_namespace
                )
            )
        self._completer = asyncio.create_task(
            self._complete_forever(), name="dispatcher-completer"
        )
        try:
            await self._intake()
            self._intake_exited.set()
            await self._done.wait()
        finally:
            self._intake_exited.set()
            self._close()
            await self._completer

    async def stop(self, drain_window_s: float) -> bool:
        """Stop intake and wait up to `drain_window_s` for in-flight messages to finish.

        Returns True if everything finished. What did not finish is left un-acked (never
        acked done), so its broker redelivers it."""
        self._stopping.set()
        self._slots.wake()
        self._resumed.set()
        drained = True
        try:
            async with asyncio.timeout(drain_window_s):
                if self._running:
                    await self._intake_exited.wait()
                await self._slots.idle.wait()
        except TimeoutError:
            drained = False
        self._close()
        if self._completer is not None:
            await self._completer  # acks of what finished before the close go out
        self._done.set()
        log.info("dispatcher stopped: drained=%s, unfinished=%d", drained, self.in_flight)
        return drained

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for handle in self._retries.values():
            handle.cancel()
        self._retries.clear()
        self._wake.set()

    # --- intake ------------------------------------------------------------------

    async def _intake(self) -> None:
        streams = self._streams
        batch = self._config.poll_batch
        poll_timeout = self._config.poll_timeout_s
        round_ = 0
        while not self._stopping.is_set():
            if self._paused_until > time.time():  # a system fault: let the backlog wait
                await self._wait_out_pause()
                continue
            slots = await self._slots.acquire(batch, self._stopping)
            if not slots:
                break
            reservation = _Reservation(slots)
            now = time.time()
            active = [s for s in streams if s.ready_at <= now]
            if not active:  # every stream is out of QPS budget or backing off an error
                self._slots.settle(reservation)
                await self._sleep_until(min(s.ready_at for s in streams))
                continue
            try:
                if all(s.empty_round >= 0 for s in active):
                    # Everything is idle: block in the sources (not in a sleep) until a
                    # message comes, or until a throttled stream gets its budget back.
                    timeout = poll_timeout
                    waiting = [s.ready_at for s in streams if s.ready_at > now]
                    if waiting:
                        timeout = max(0.0, min(timeout, min(waiting) - now))
                    await self._poll_idle(active, reservation, timeout, round_)
                else:
                    # Skip streams that were empty in the round just before, so the
                    # busy ones get the polls; the skipped ones are retried next round.
                    ready = [s for s in active if s.empty_round != round_ - 1]
                    stream = (
                        ready[0] if len(ready) == 1
                        else self._rng.choices(ready, [s.weight for s in ready])[0]
                    )
                    await self._poll(stream, reservation, slots, 0.0, round_)
            finally:
                self._slots.settle(reservation)
            round_ += 1

    async def _wait_out_pause(self) -> None:
        """Wait while a system fault pauses intake: until the pause ends, a post
        succeeds again, or stop()."""
        while self._paused_until > time.time() and not self._stopping.is_set():
            self._resumed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, self._paused_until - time.time())):
                    await self._resumed.wait()

    async def _sleep_until(self, when: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, when - time.time())):
                await self._stopping.wait()

    async def _poll_idle(
        self, active: list[_StreamState], reservation: _Reservation, wait_s: float,
        round_: int,
    ) -> int:
        slots = reservation.left
        if len(active) == 1 or slots < len(active):
            stream = self._rng.choices(active, [s.weight for s in active])[0]
            return await self._poll(stream, reservation, slots, wait_s, round_)
        share = slots // len(active)
        counts = await asyncio.gather(
            *(self._poll(s, reservation, share, wait_s, round_) for s in active)
        )
        return sum(counts)

    async def _poll(
        self, s: _StreamState, reservation: _Reservation, most: int, wait_s: float,
        round_: int,
    ) -> int:
        """Poll up to `most` messages of one stream (within its QPS budget) and submit
        them, each claiming one slot of `reservation`. Returns how many were taken."""
        limiter, limit = self._limiter, s.limit
        try:
            if limit is not None and limiter is not None:
                window = await limiter.get_window_stats(limit, RATE_LIMIT_NAMESPACE, s.name)
                if window.remaining <= 0:
                    # When the oldest hit leaves the window (never "now": no spinning).
                    s.ready_at = max(window.reset_time, time.time() + MIN_THROTTLE_S)
                    return 0
                most = min(most, window.remaining)
            messages = await s.source.poll(most, wait_s)
        except Exception:  # a broken broker (or limiter store) must not stop the others
            s.errors += 1
            self.stats.poll_errors += 1
            delay = min(C.SOURCE_ERROR_BACKOFF_MAX_S, self._backoff.ceiling(s.errors))
            s.ready_at = time.time() + delay
            log.exception("poll of stream %s failed; retrying in %.2fs", s.name, delay)
            return 0
        s.errors = 0
        if s.has_lag and time.time() >= s.next_lag_at:
            await self._report_lag(s)
        if not messages:
            s.empty_round = round_
            return 0
        s.empty_round = -2
        # A system fault began while this poll waited: these wait for it to end too (a
        # stop meanwhile leaves them un-acked, for redelivery).
        await self._wait_out_pause()
        if self._stopping.is_set() and self._paused_until > time.time():
            return 0
        if limit is not None and limiter is not None:
            return await self._submit_within_budget(s, reservation, limit, limiter, messages)
        if self._closed:  # stop() gave up while we polled: leave these for redelivery
            return 0
        self._submit_batch(s, reservation, messages)
        return len(messages)

    async def _submit_within_budget(
        self, s: _StreamState, reservation: _Reservation, limit: RateLimitItem,
        limiter: MovingWindowRateLimiter, messages: list[Message],
    ) -> int:
        """Spend budget for `messages`, then submit them. Spent after the poll, so a
        stream trickling below its budget never pays for messages it did not get. When
        another replica took the shared (Redis) budget meanwhile, the batch waits, in
        parts, for the window to free slots: replicas together keep to `max_qps`.
        Returns how many were submitted; the rest stay un-acked if stop() comes first."""
        submitted = 0
        while submitted < len(messages) and not self._closed:
            want = len(messages) - submitted
            try:
                if not await limiter.hit(limit, RATE_LIMIT_NAMESPACE, s.name, cost=want):
                    window = await limiter.get_window_stats(limit, RATE_LIMIT_NAMESPACE, s.name)
                    want = min(want, window.remaining)
                    if want <= 0 or not await limiter.hit(
                        limit, RATE_LIMIT_NAMESPACE, s.name, cost=want
                    ):
                        s.ready_at = window.reset_time
                        if self._stopping.is_set():
                            break
                        await self._sleep_until(window.reset_time)
                        continue
            except Exception:  # a broken limiter store must not stall the stream
                log.warning("QPS limiter of stream %s failed", s.name, exc_info=True)
            self._submit_batch(s, reservation, messages[submitted : submitted + want])
            submitted += want
        return submitted

    async def _report_lag(self, s: _StreamState) -> None:
        s.next_lag_at = time.time() + C.LAG_REPORT_INTERVAL_S
        try:
            lag = s.source.lag()  # type: ignore[attr-defined]
            if inspect.isawaitable(lag):
                lag = await lag
            self._metrics.lag(s.name, int(lag))
        except Exception:
            log.warning("lag() of stream %s failed", s.name, exc_info=True)

    def _submit_batch(
        self, s: _StreamState, reservation: _Reservation, messages: list[Message]
    ) -> None:
        self.stats.received += len(messages)
        self._metrics.received(s.name, len(messages))
        now = time.time()
        deadline = now + s.deadline_s if s.deadline_s else None
        name, eligibilities = s.name, s.eligibilities
        claim = self._slots.claim
        for message in messages:
            try:
                envelope = decode_envelope(message.value)
            except DecodeError as exc:
                claim(reservation)
                entry = _Entry(self, s, message, None)
                entry.last_error = str(exc)
                self._finish(entry, None)
                continue
            payload = TaskPayload(
                payload_id=f"{name}:{message.partition}:{message.offset}",
                post=envelope.post,
                user=envelope.user,
                context=envelope.context or _EMPTY_CONTEXT,
                eligibilities=eligibilities,
                attempt=message.attempt,
                deadline=deadline,
                source=name,
                mode=s.mode,
                enqueued_at=now,
            )
            claim(reservation)  # only once its entry exists, to finish and release it
            self._submit(_Entry(self, s, message, payload))

    def _submit(self, entry: _Entry) -> None:
        assert entry.payload is not None
        try:
            future = self._executor.submit(entry.payload)
        except Exception as exc:  # executor down or full: classified in _complete
            self._finish(entry, exc)
            return
        if future.done():  # resolved already (a cache hit, a fast path): skip a callback
            self._finish(entry, future)
        else:
            future.add_done_callback(entry)

    def _finish(self, entry: _Entry, outcome: object) -> None:
        """Done-callback side: queue for the completer (no awaiting in a callback)."""
        self._finished.append((entry, outcome))
        self._wake.set()

    # --- completion --------------------------------------------------------------

    async def _complete_forever(self) -> None:
        finished, wake = self._finished, self._wake
        while True:
            await wake.wait()
            wake.clear()
            while finished:
                entry, outcome = finished.popleft()
                try:
                    await self._complete(entry, outcome)
                except Exception:  # never lose the completer to one bad message
                    log.exception(
                        "completing %s:%s:%s failed", entry.stream.name,
                        entry.message.partition, entry.message.offset,
                    )
                    self._settle(entry)
            for s in self._streams:
                if s.unreported_done:
                    self._metrics.done(s.name, s.unreported_done)
                    s.unreported_done = 0
            self._metrics.in_flight(self.in_flight)
            if self._closed:
                return

    async def _complete(self, entry: _Entry, outcome: object) -> None:
        s = entry.stream
        if entry.payload is None:
            await self._dead_letter(entry, C.DEAD_REASON_DECODE)
            return
        system = False
        if isinstance(outcome, asyncio.Future):
            if outcome.cancelled():
                entry.last_error = "cancelled"
            elif (exc := outcome.exception()) is not None:
                entry.last_error = _describe(exc)
                system = is_system_fault(exc)
                if isinstance(exc, EngineDiedError):
                    # An engine gone is the system's fault (a kill, an OOM of the whole
                    # engine), unless the post keeps being there when engines die: from
                    # its max_attempts-th death on, it is a suspect and each death costs
                    # an attempt, so a post that crashes engines ends as a dead letter.
                    entry.engine_deaths += 1
                    system = entry.engine_deaths < self._config.max_attempts
            else:
                result: TaskResult = outcome.result()
                if result.finished_at > result.started_at > 0:
                    self._metrics.task_duration(s.name, result.finished_at - result.started_at)
                for plan, seconds in result.plan_seconds.items():
                    self._metrics.plan_duration(plan, seconds)
                if (rule := result.reasons.get(C.SELECTION_REASON_KEY)) is not None:
                    self._metrics.not_selected(s.name, rule)
                if result.success:  # the system works again: end any pause now
                    if self._paused_until:
                        self._paused_until = 0.0
                        self._resumed.set()
                    await self._ack(entry, Outcome.DONE)
                    self.stats.done += 1
                    s.unreported_done += 1
                    return
                entry.last_error = result.error or "failed"
                system = result.system_fault
                if result.rejected and not system and not self._closed:
                    await self._dead_letter(entry, result.rejected)  # retrying cannot help
                    return
        elif isinstance(outcome, BaseException):
            entry.last_error = _describe(outcome)
            system = is_system_fault(outcome)
        if self._closed:  # stopping: leave it un-acked for redelivery
            self._settle(entry)
            return
        if system:
            self._retry_system_fault(entry)
            return
        if entry.attempt >= self._config.max_attempts:
            await self._dead_letter(entry, C.DEAD_REASON_MAX_ATTEMPTS)
            return
        self.stats.retried += 1
        self._metrics.retried(s.name, 1)
        if s.source.handles_retry:
            await self._ack(entry, Outcome.RETRY, reason=entry.last_error)
        else:  # keep the slot while waiting, so in-flight counts the retry
            delay = self._backoff.delay(entry.attempt)
            loop = asyncio.get_running_loop()
            self._retries[entry] = loop.call_later(delay, self._resubmit, entry)

    def _retry_system_fault(self, entry: _Entry) -> None:
        """Not the post's fault: keep its slot and its attempt count, pause intake and
        resubmit after the pause (equal jitter, so a burst of failures spreads out).
        Even for sources that retry themselves, the message stays here: their retry
        would count a delivery against the post."""
        self.stats.system_faults += 1
        entry.system_faults += 1
        # Its own backoff grows with its system faults in a row; the pause lasts as long
        # as its wait, and every failure during an outage extends it: intake stays
        # paused while posts keep failing this way, and resumes on a success, or when
        # the pause runs out with nothing failing any more.
        pause = self._backoff.ceiling(entry.system_faults)
        now = time.time()
        if self._paused_until <= now:
            log.warning(
                "system fault (%s); pausing intake, the post is retried without "
                "counting an attempt", entry.last_error,
            )
        self._paused_until = max(self._paused_until, now + pause)
        delay = pause * (0.5 + 0.5 * self._rng.random())
        loop = asyncio.get_running_loop()
        self._retries[entry] = loop.call_later(delay, self._resubmit, entry, False)

    def _resubmit(self, entry: _Entry, count_attempt: bool = True) -> None:
        self._retries.pop(entry, None)
        if self._closed:
            return
        assert entry.payload is not None
        if count_attempt:
            entry.attempt += 1
        deadline = time.time() + entry.stream.deadline_s if entry.stream.deadline_s else None
        entry.payload = msgspec.structs.replace(
            entry.payload, attempt=entry.attempt, deadline=deadline
        )
        self._submit(entry)

    async def _dead_letter(self, entry: _Entry, reason: str) -> None:
        message = entry.message
        record = DeadLetter(
            source=entry.stream.name,
            reason=reason,
            attempts=entry.attempt,
            last_error=entry.last_error,
            original=message.value,
            partition=message.partition,
            offset=message.offset,
            key=message.key,
        )
        await self._ack(entry, Outcome.DEAD, reason=reason, dead_letter=encode(record))
        self.stats.dead += 1
        self._metrics.dead_lettered(entry.stream.name, reason, 1)
        log.warning(
            "dead-lettered %s:%s:%s (%s after %d attempts): %s", entry.stream.name,
            message.partition, message.offset, reason, entry.attempt, entry.last_error,
        )

    async def _ack(
        self, entry: _Entry, outcome: Outcome, *, reason: str | None = None,
        dead_letter: bytes | None = None,
    ) -> None:
        """Finish a message at its source and free its slot, whatever the ack does: a
        failed ack leaves the message un-acked, which the broker redelivers."""
        try:
            await entry.stream.source.ack(
                entry.message, outcome, reason=reason, dead_letter=dead_letter
            )
        except Exception:
            self.stats.ack_errors += 1
            log.exception(
                "ack %s of %s:%s:%s failed", outcome, entry.stream.name,
                entry.message.partition, entry.message.offset,
            )
        finally:
            self._settle(entry)

    def _settle(self, entry: _Entry) -> None:
        if not entry.settled:
            entry.settled = True
            self._slots.release()
