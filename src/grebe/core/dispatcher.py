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

This module is the intake half (lifecycle, polling, QPS budgets, submission); the
`Completer` it owns (grebe.core.completion) is the other (acks, retries, dead letters),
composed rather than inherited so each half's state is its own; grebe.core.inflight
holds the slots and grebe.core.ratelimit the budgets.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
import time
from collections.abc import Sequence

from limits import RateLimitItem
from limits.aio.strategies import MovingWindowRateLimiter

from grebe import constants as C
from grebe.codec import decode_envelope
from grebe.core.backoff import Backoff
from grebe.core.completion import Completer
from grebe.core.delivery import DispatcherStats, Entry, Stream, StreamState
from grebe.core.executor import Executor
from grebe.core.inflight import InFlightSlots, Reservation
from grebe.core.metrics import DispatcherMetrics, NullMetrics
from grebe.core.ratelimit import (
    MEMORY_STORAGE_URI,
    RATE_LIMIT_NAMESPACE,
    limiter_storage_from,
)
from grebe.core.settings import DispatcherSettings
from grebe.core.source import Message, ReportsLag
from grebe.errors import ConfigError, DecodeError
from grebe.types import TaskPayload, UserContext

__all__ = ["Dispatcher", "DispatcherStats", "Stream"]

log = logging.getLogger(__name__)

MIN_THROTTLE_S = 0.001  # a throttled stream waits at least this, whatever the store says
_EMPTY_CONTEXT = UserContext()


class Dispatcher:
    """Multiplexes streams into an executor, with delivery guarantees (see module doc).

    The caller starts and stops the sources and the executor; the dispatcher only uses
    them between `run()` and `stop()`."""

    def __init__(
        self,
        streams: Sequence[Stream],
        executor: Executor,
        settings: DispatcherSettings,
        *,
        metrics: DispatcherMetrics | None = None,
        rng: random.Random | None = None,
        limiter_storage: str = MEMORY_STORAGE_URI,
        limiter_namespace: str = C.DEFAULT_REDIS_NAMESPACE,
    ) -> None:
        if not streams:
            raise ConfigError("the dispatcher needs at least one stream")
        names = [s.settings.name for s in streams]
        if len(set(names)) != len(names):
            raise ConfigError(f"stream names must be unique, got {names}")
        self._streams = [StreamState(s) for s in streams]
        self._executor = executor
        self._settings = settings
        self._metrics: DispatcherMetrics = metrics or NullMetrics()
        self._rng = rng or random.Random()
        self._backoff = Backoff(settings.backoff_base_s, settings.backoff_max_s, self._rng)
        self._limiter_storage = limiter_storage
        self._limiter_namespace = limiter_namespace
        self._limiter: MovingWindowRateLimiter | None = None
        self.stats = DispatcherStats()
        self._slots = InFlightSlots(settings.max_in_flight)
        # The second half: acks, retries, dead letters (grebe.core.completion).
        self.completer = Completer(
            self._streams, settings, metrics=self._metrics, stats=self.stats,
            slots=self._slots, backoff=self._backoff, rng=self._rng, submit=self._submit,
        )
        self._stopping = asyncio.Event()
        self._done = asyncio.Event()  # set once stop() has closed the dispatcher
        self._intake_exited = asyncio.Event()
        self._running = False
        self._completing: asyncio.Task[None] | None = None

    @property
    def in_flight(self) -> int:
        """Messages held: running, or waiting for their retry or their ack."""
        return self.completer.in_flight

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
        self._completing = asyncio.create_task(
            self.completer.run(), name="dispatcher-completer"
        )
        try:
            await self._intake()
            self._intake_exited.set()
            await self._done.wait()
        finally:
            self._intake_exited.set()
            self.completer.close()
            await self._completing

    async def stop(self, drain_window_s: float) -> bool:
        """Stop intake and wait up to `drain_window_s` for in-flight messages to finish.

        Returns True if everything finished. What did not finish is left un-acked (never
        acked done), so its broker redelivers it."""
        self._stopping.set()
        self._slots.wake()
        self.completer.resumed.set()
        drained = True
        try:
            async with asyncio.timeout(drain_window_s):
                if self._running:
                    await self._intake_exited.wait()
                await self._slots.idle.wait()
        except TimeoutError:
            drained = False
        self.completer.close()
        if self._completing is not None:
            await self._completing  # acks of what finished before the close go out
        self._done.set()
        log.info("dispatcher stopped: drained=%s, unfinished=%d", drained, self.in_flight)
        return drained

    # --- intake ------------------------------------------------------------------

    async def _intake(self) -> None:
        streams = self._streams
        batch = self._settings.poll_batch
        poll_timeout = self._settings.poll_timeout_s
        round_ = 0
        completer = self.completer
        while not self._stopping.is_set():
            if completer.paused_until > time.time():  # a system fault: let the backlog wait
                await self._wait_out_pause()
                continue
            slots = await self._slots.acquire(batch, self._stopping)
            if not slots:
                break
            reservation = Reservation(slots)
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
        completer = self.completer
        while completer.paused_until > time.time() and not self._stopping.is_set():
            completer.resumed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, completer.paused_until - time.time())):
                    await completer.resumed.wait()

    async def _sleep_until(self, when: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, when - time.time())):
                await self._stopping.wait()

    async def _poll_idle(
        self, active: list[StreamState], reservation: Reservation, wait_s: float,
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
        self, s: StreamState, reservation: Reservation, most: int, wait_s: float,
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
        if s.lag_source is not None and time.time() >= s.next_lag_at:
            await self._report_lag(s, s.lag_source)
        if not messages:
            s.empty_round = round_
            return 0
        s.empty_round = -2
        # A system fault began while this poll waited: these wait for it to end too (a
        # stop meanwhile leaves them un-acked, for redelivery).
        await self._wait_out_pause()
        if self._stopping.is_set() and self.completer.paused_until > time.time():
            return 0
        if limit is not None and limiter is not None:
            return await self._submit_within_budget(s, reservation, limit, limiter, messages)
        if self.completer.closed:  # stop() gave up while we polled: leave for redelivery
            return 0
        self._submit_batch(s, reservation, messages)
        return len(messages)

    async def _submit_within_budget(
        self, s: StreamState, reservation: Reservation, limit: RateLimitItem,
        limiter: MovingWindowRateLimiter, messages: list[Message],
    ) -> int:
        """Spend budget for `messages`, then submit them. Spent after the poll, so a
        stream trickling below its budget never pays for messages it did not get. When
        another replica took the shared (Redis) budget meanwhile, the batch waits, in
        parts, for the window to free slots: replicas together keep to `max_qps`.
        Returns how many were submitted; the rest stay un-acked if stop() comes first."""
        submitted = 0
        while submitted < len(messages) and not self.completer.closed:
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

    async def _report_lag(self, s: StreamState, source: ReportsLag) -> None:
        s.next_lag_at = time.time() + C.LAG_REPORT_INTERVAL_S
        try:
            lag = source.lag()
            if inspect.isawaitable(lag):
                lag = await lag
            self._metrics.lag(s.name, int(lag))
        except Exception:
            log.warning("lag() of stream %s failed", s.name, exc_info=True)

    def _submit_batch(
        self, s: StreamState, reservation: Reservation, messages: list[Message]
    ) -> None:
        self.stats.received += len(messages)
        self._metrics.received(s.name, len(messages))
        now = time.time()
        deadline = now + s.deadline_s if s.deadline_s else None
        name, eligibilities = s.name, s.eligibilities
        claim, completer = self._slots.claim, self.completer
        for message in messages:
            try:
                envelope = decode_envelope(message.value)
            except DecodeError as exc:
                claim(reservation)
                entry = Entry(completer, s, message, None)
                entry.last_error = str(exc)
                completer.finish(entry, None)
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
            self._submit(Entry(completer, s, message, payload))

    def _submit(self, entry: Entry) -> None:
        assert entry.payload is not None
        try:
            future = self._executor.submit(entry.payload)
        except Exception as exc:  # executor down or full: classified by the completer
            self.completer.finish(entry, exc)
            return
        if future.done():  # resolved already (a cache hit, a fast path): skip a callback
            self.completer.finish(entry, future)
        else:
            future.add_done_callback(entry)

