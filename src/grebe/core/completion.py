"""The dispatcher's second half: from a finished payload to an ack, a retry or a dead letter.

Done-callbacks (an `Entry` is its future's callback) only queue the outcome; one completer
coroutine drains that queue, so no asyncio.Task is created per message. A post's own
failure is retried with a jittered backoff up to `max_attempts`, then dead-lettered; a
system fault keeps its attempt count, pauses intake and is retried after the pause (see
grebe.core.dispatcher for the whole picture). The dispatcher owns one `Completer` and
shares with it only what both halves need: the slots, the counters, and the pause a
system fault puts on intake (`paused_until`, `resumed`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Callable

import msgspec

from grebe import constants as C
from grebe.codec import encode
from grebe.core.backoff import Backoff
from grebe.core.delivery import DispatcherStats, Entry, StreamState, describe
from grebe.core.engine import EngineDiedError
from grebe.core.inflight import InFlightSlots
from grebe.core.metrics import DispatcherMetrics
from grebe.core.settings import DispatcherSettings
from grebe.core.source import Outcome
from grebe.errors import is_system_fault
from grebe.types import DeadLetter, TaskResult

log = logging.getLogger("grebe.core.dispatcher")  # one logger for both halves


class Completer:
    """Completion, retries and dead letters of the dispatcher's messages. `submit` is
    the dispatcher's: a retry goes back to the executor the way a new message does."""

    def __init__(
        self, streams: list[StreamState], settings: DispatcherSettings, *,
        metrics: DispatcherMetrics, stats: DispatcherStats, slots: InFlightSlots,
        backoff: Backoff, rng: random.Random, submit: Callable[[Entry], None],
    ) -> None:
        self._streams = streams
        self._settings = settings
        self._metrics = metrics
        self.stats = stats
        self._slots = slots
        self._backoff = backoff
        self._rng = rng
        self._submit = submit
        self._finished: deque[tuple[Entry, object]] = deque()
        self._wake = asyncio.Event()
        self._retries: dict[Entry, asyncio.TimerHandle] = {}
        self.closed = False  # stopping: what finishes now is left for redelivery
        self.paused_until = 0.0  # epoch seconds: intake waits while a system fault lasts
        self.resumed = asyncio.Event()  # a success (or stop) ends the pause early

    @property
    def in_flight(self) -> int:
        """Messages held: running, or waiting for their retry or their ack."""
        return self._slots.used - self._slots.reserved

    def finish(self, entry: Entry, outcome: object) -> None:
        """Done-callback side: queue for the completer (no awaiting in a callback)."""
        self._finished.append((entry, outcome))
        self._wake.set()

    def close(self) -> None:
        """Stop retrying (pending retries are dropped, left un-acked for redelivery) and
        let `run` return once what is queued is completed."""
        if self.closed:
            return
        self.closed = True
        for handle in self._retries.values():
            handle.cancel()
        self._retries.clear()
        self._wake.set()

    async def run(self) -> None:
        """Complete finished messages until `close()`."""
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
            if self.closed:
                return

    async def _complete(self, entry: Entry, outcome: object) -> None:
        s = entry.stream
        if entry.payload is None:
            await self._dead_letter(entry, C.DEAD_REASON_DECODE)
            return
        system = False
        if isinstance(outcome, asyncio.Future):
            if outcome.cancelled():
                entry.last_error = "cancelled"
            elif (exc := outcome.exception()) is not None:
                entry.last_error = describe(exc)
                system = is_system_fault(exc)
                if isinstance(exc, EngineDiedError):
                    # An engine gone is the system's fault (a kill, an OOM of the whole
                    # engine), unless the post keeps being there when engines die: from
                    # its max_attempts-th death on, it is a suspect and each death costs
                    # an attempt, so a post that crashes engines ends as a dead letter.
                    entry.engine_deaths += 1
                    system = entry.engine_deaths < self._settings.max_attempts
            else:
                result: TaskResult = outcome.result()
                if result.finished_at > result.started_at > 0:
                    self._metrics.task_duration(s.name, result.finished_at - result.started_at)
                for plan, seconds in result.plan_seconds.items():
                    self._metrics.plan_duration(plan, seconds)
                if (rule := result.reasons.get(C.SELECTION_REASON_KEY)) is not None:
                    self._metrics.not_selected(s.name, rule)
                if result.success:  # the system works again: end any pause now
                    if self.paused_until:
                        self.paused_until = 0.0
                        self.resumed.set()
                    await self._ack(entry, Outcome.DONE)
                    self.stats.done += 1
                    s.unreported_done += 1
                    return
                entry.last_error = result.error or "failed"
                system = result.system_fault
                if result.rejected and not system and not self.closed:
                    await self._dead_letter(entry, result.rejected)  # retrying cannot help
                    return
        elif isinstance(outcome, BaseException):
            entry.last_error = describe(outcome)
            system = is_system_fault(outcome)
        if self.closed:  # stopping: leave it un-acked for redelivery
            self._settle(entry)
            return
        if system:
            self._retry_system_fault(entry)
            return
        if entry.attempt >= self._settings.max_attempts:
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

    def _retry_system_fault(self, entry: Entry) -> None:
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
        if self.paused_until <= now:
            log.warning(
                "system fault (%s); pausing intake, the post is retried without "
                "counting an attempt", entry.last_error,
            )
        self.paused_until = max(self.paused_until, now + pause)
        delay = pause * (0.5 + 0.5 * self._rng.random())
        loop = asyncio.get_running_loop()
        self._retries[entry] = loop.call_later(delay, self._resubmit, entry, False)

    def _resubmit(self, entry: Entry, count_attempt: bool = True) -> None:
        self._retries.pop(entry, None)
        if self.closed:
            return
        assert entry.payload is not None
        if count_attempt:
            entry.attempt += 1
        deadline = time.time() + entry.stream.deadline_s if entry.stream.deadline_s else None
        entry.payload = msgspec.structs.replace(
            entry.payload, attempt=entry.attempt, deadline=deadline
        )
        self._submit(entry)

    async def _dead_letter(self, entry: Entry, reason: str) -> None:
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
        self, entry: Entry, outcome: Outcome, *, reason: str | None = None,
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

    def _settle(self, entry: Entry) -> None:
        if not entry.settled:
            entry.settled = True
            self._slots.release()
