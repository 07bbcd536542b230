"""Feed the store from a stream: poll a batch, apply it, then ack it.

Acking only after applying means a crash redelivers what was not yet applied; applying
twice is harmless (a duplicate create is ignored, a delete is a tombstone). A message
that does not decode is dead-lettered through the source and never stops the loop.

`ready` is set once ingest has caught up with the head of the stream (a poll returned
less than a full batch and, where the source can tell, nothing is left); a service
should report healthy only then, so it never serves a half-loaded store.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time

from grebe import codec
from grebe.core.source import Message, Outcome, Source
from grebe.errors import DecodeError
from grebe.thunder.events import PostCreate, ThunderEvent, decode_event
from grebe.thunder.metrics import ThunderMetrics
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import ThunderStore
from grebe.types import DeadLetter

log = logging.getLogger(__name__)


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
        self.ready = asyncio.Event()
        self.applied = 0  # events that changed the store
        self.ignored = 0  # duplicates, late creates, deletes of unknown posts
        self.dead = 0
        self._last_message_ts = 0.0
        self._idle = True
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        if metrics is not None:
            metrics.watch_lag(lambda: self.lag_seconds)

    @property
    def lag_seconds(self) -> float:
        """How far behind real time the last applied message was; 0 when idle at head."""
        if self._idle or not self._last_message_ts:
            return 0.0
        return max(0.0, time.time() - self._last_message_ts)

    async def lag_messages(self) -> int | None:
        """Messages behind the head, when the source can tell (an optional `lag()`)."""
        lag = getattr(self.source, "lag", None)
        if lag is None:
            return None
        value = lag()
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
        batch = self.settings.poll_batch
        while not self._stopping.is_set():
            messages = await self.source.poll(batch, self.settings.poll_timeout_s)
            if messages:
                await self.process(messages)
            if len(messages) < batch:
                self._idle = True
                if not self.ready.is_set() and await self._at_head():
                    self.ready.set()
                    if self.metrics is not None:
                        self.metrics.ready.set(1)
                    log.info("thunder caught up: %d posts held", len(self.store))

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
