"""Feed the store from a stream: poll a batch, apply it, then ack it.

Acking only after applying means a crash redelivers what was not yet applied; applying
twice is harmless (a duplicate create is ignored, a delete is a tombstone). A message
that does not decode is dead-lettered through the source and never stops the loop.

`ready` is set once ingest has caught up with the head of the stream (a poll returned
less than a full batch and, where the source can tell, nothing is left); a service
should report healthy only then, so it never serves a half-loaded store.

A broker error (a failed poll or ack) is a system fault, not a reason to stop: ingest
clears `ready` (the service goes NOT_SERVING and refuses queries with UNAVAILABLE),
counts the error, exposes how long it has been unable to read, and retries with
exponential backoff; once a poll succeeds again it sets `ready` only after catching up.
Any other exception is a bug: `ready` is cleared (fail closed) and the task ends with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time

from grebe import codec
from grebe.core.source import Message, Outcome, ReportsLag, Source
from grebe.errors import BrokerError, DecodeError
from grebe.thunder.events import PostCreate, ThunderEvent, decode_event
from grebe.thunder.metrics import ThunderMetrics
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import ThunderStore
from grebe.types import DeadLetter

log = logging.getLogger(__name__)

#: Failures of reading the stream that a retry can cure (the broker or the network).
RETRYABLE = (BrokerError, OSError, TimeoutError)


class Readiness(asyncio.Event):
    """An Event whose clearing can be awaited too, so the health service can follow
    ingest both ways (caught up -> SERVING, lost the stream -> NOT_SERVING)."""

    def __init__(self) -> None:
        super().__init__()
        self._cleared = asyncio.Event()
        self._cleared.set()

    def set(self) -> None:
        super().set()
        self._cleared.clear()

    def clear(self) -> None:
        super().clear()
        self._cleared.set()

    async def wait_cleared(self) -> None:
        await self._cleared.wait()


class ThunderIngest:
    def __init__(
        self,
        source: Source,
        store: ThunderStore,
        settings: ThunderSettings | None = None,
        metrics: ThunderMetrics | None = None,
        *,
        commit: bool = True,
    ) -> None:
        self.source = source
        #: False: read without acking, so nothing is consumed (a one-shot replay, e.g.
        #: the `grebe feed` command loading the store); bad messages are only skipped.
        self.commit = commit
        self.store = store
        self.settings = settings or store.settings
        self.metrics = metrics
        self.ready = Readiness()
        self.poll_errors = 0
        self._failing_since: float | None = None  # monotonic time of the first failure
        self._next_lag_check = 0.0
        self.applied = 0  # events that changed the store
        self.ignored = 0  # duplicates, late creates, deletes of unknown posts
        self.dead = 0
        self._last_message_ts = 0.0
        self._idle = True
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        if metrics is not None:
            metrics.watch_lag(lambda: self.lag_seconds)
            metrics.watch_stalled(lambda: self.stalled_seconds)

    @property
    def stalled_seconds(self) -> float:
        """How long ingest has been unable to read the stream; 0 while it reads."""
        if self._failing_since is None:
            return 0.0
        return time.monotonic() - self._failing_since

    @property
    def lag_seconds(self) -> float:
        """How far behind real time the last applied message was; 0 when idle at head."""
        if self._idle or not self._last_message_ts:
            return 0.0
        return max(0.0, time.time() - self._last_message_ts)

    async def lag_messages(self) -> int | None:
        """Messages behind the head, when the source can tell (an optional `lag()`)."""
        if not isinstance(self.source, ReportsLag):
            return None
        value = self.source.lag()
        if inspect.isawaitable(value):
            value = await value
        return int(value)

    async def start(self) -> None:
        await self.source.start()
        self._tasks = [
            asyncio.create_task(self._consume(), name="thunder-ingest"),
            asyncio.create_task(self._trim_periodically(), name="thunder-trim"),
        ]

    async def stop(self) -> None:
        """Stop after the batch in hand is applied and acked; then stop the source."""
        self._stopping.set()
        if self._tasks:
            _done, pending = await asyncio.wait(
                self._tasks, timeout=self.settings.poll_timeout_s + 1.0
            )
            for task in pending:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._tasks = []
        await self.source.stop()

    async def wait_ready(self, timeout_s: float | None = None) -> None:
        await asyncio.wait_for(self.ready.wait(), timeout_s)

    async def _consume(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                await self._step()
            except RETRYABLE as exc:
                failures += 1
                self._lost_stream(exc, failures)
                await self._backoff(failures)
                continue
            except Exception:
                self._set_ready(False)
                log.exception("thunder ingest failed; not serving")
                raise
            if failures:
                log.info("thunder ingest reads again after %d failures", failures)
                failures = 0
                self._failing_since = None

    async def _step(self) -> None:
        """One poll, applied and acked; `ready` once a short poll finds the head."""
        batch = self.settings.poll_batch
        messages = await self.source.poll(batch, self.settings.poll_timeout_s)
        if messages:
            await self.process(messages)
        if len(messages) < batch:
            self._idle = True
            if not self.ready.is_set() and await self._at_head():
                self._set_ready(True)
                log.info("thunder caught up: %d posts held", len(self.store))
        await self._check_lag()

    async def _check_lag(self) -> None:
        """Every `lag_check_interval_s`, publish how many messages are left to read."""
        now = time.monotonic()
        if self.metrics is None or now < self._next_lag_check:
            return
        self._next_lag_check = now + self.settings.lag_check_interval_s
        try:
            lag = await self.lag_messages()
        except Exception as exc:  # the gauge is advisory: never stop ingest for it
            log.debug("source lag() failed: %s", exc)
            return
        if lag is not None:
            self.metrics.lag_messages.set(lag)

    def _set_ready(self, ready: bool) -> None:
        if ready:
            self.ready.set()
        else:
            self.ready.clear()
        if self.metrics is not None:
            self.metrics.ready.set(1 if ready else 0)

    def _lost_stream(self, exc: BaseException, failures: int) -> None:
        self.poll_errors += 1
        if self.metrics is not None:
            self.metrics.poll_errors.inc()
        if self._failing_since is None:
            self._failing_since = time.monotonic()
        if self.ready.is_set():
            self._set_ready(False)
        log.warning("thunder ingest cannot read the stream (failure %d): %s", failures, exc)

    async def _backoff(self, failures: int) -> None:
        s = self.settings
        delay = min(s.retry_backoff_max_s, s.retry_backoff_s * 2 ** (failures - 1))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), delay)

    async def _at_head(self) -> bool:
        try:
            lag = await self.lag_messages()
        except Exception:  # a source that cannot tell its lag must not block readiness
            log.exception("source lag() failed; trusting the short poll")
            return True
        return lag is None or lag == 0

    async def process(self, messages: list[Message]) -> None:
        """Apply a batch to the store, then ack every message of it."""
        outcomes: list[tuple[Message, Outcome, str | None]] = []
        now = self.store.clock()
        for message in messages:
            try:
                event = decode_event(message.value)
            except DecodeError as exc:
                outcomes.append((message, Outcome.DEAD, str(exc)))
                continue
            if event is not None:  # None: only ids, nothing to store
                self._apply(event, now)
            outcomes.append((message, Outcome.DONE, None))
        if messages:
            self._last_message_ts = messages[-1].timestamp
            self._idle = False
        for message, outcome, reason in outcomes:
            if not self.commit:
                if outcome is Outcome.DEAD:
                    self.dead += 1
                continue
            if outcome is Outcome.DEAD:
                self.dead += 1
                if self.metrics is not None:
                    self.metrics.ingested.labels("dead").inc()
                log.warning("thunder: dead-lettering %s@%d: %s", message.source,
                            message.offset, reason)
                await self.source.ack(
                    message, outcome, reason=reason,
                    dead_letter=codec.encode(DeadLetter(
                        source=message.source, reason=reason or "", attempts=message.attempt,
                        last_error=reason, original=message.value,
                        partition=message.partition, offset=message.offset, key=message.key,
                    )),
                )
            else:
                await self.source.ack(message, outcome)

    def _apply(self, event: ThunderEvent, now: float) -> None:
        changed = self.store.apply(event, now)
        if changed:
            self.applied += 1
        else:
            self.ignored += 1
        if self.metrics is not None:
            kind = "create" if isinstance(event, PostCreate) else "delete"
            self.metrics.ingested.labels(kind if changed else "ignored").inc()

    async def _trim_periodically(self) -> None:
        interval = self.settings.trim_interval_s
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), interval)
                return
            removed = 0
            for removed in self.store.trim_steps():  # noqa: B007 - running total
                await asyncio.sleep(0)  # let queries and ingest run between chunks
            log.debug("thunder trim removed %d posts; %d held", removed, len(self.store))
