"""The dispatcher's bookkeeping, shared by its intake (grebe.core.dispatcher) and its
completion (grebe.core.completion): a stream's state and one message's entry."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grebe.core.ratelimit import qps_item
from grebe.core.settings import StreamSettings
from grebe.core.source import Message, ReportsLag, Source
from grebe.types import TaskPayload, TaskResult

if TYPE_CHECKING:
    from grebe.core.completion import Completer


@dataclass(frozen=True)
class Stream:
    """A Source bound to its settings (weight, QPS, eligibilities, deadline)."""

    source: Source
    settings: StreamSettings


@dataclass
class DispatcherStats:
    received: int = 0
    done: int = 0
    retried: int = 0
    dead: int = 0
    poll_errors: int = 0
    ack_errors: int = 0
    system_faults: int = 0  # failures of the system, retried without counting an attempt


class StreamState:
    __slots__ = (
        "deadline_s", "eligibilities", "empty_round", "errors", "lag_source", "limit", "mode",
        "name", "next_lag_at", "ready_at", "source", "unreported_done", "weight",
    )

    def __init__(self, stream: Stream) -> None:
        self.source = stream.source
        self.name = stream.settings.name
        self.weight = stream.settings.weight
        self.eligibilities = frozenset(stream.settings.eligibilities)
        self.mode = stream.settings.mode  # what plans read as payload.mode
        self.deadline_s = stream.settings.deadline_s
        self.limit = qps_item(stream.settings.max_qps) if stream.settings.max_qps else None
        self.ready_at = 0.0  # epoch seconds; later while its QPS budget or an error holds it
        self.empty_round = -2  # the round its last poll came back empty, or -2
        self.errors = 0
        # The source as ReportsLag when it reports lag (checked once, not per poll).
        self.lag_source = stream.source if isinstance(stream.source, ReportsLag) else None
        self.next_lag_at = 0.0
        self.unreported_done = 0  # acked since the completer last told the metrics


class Entry:
    """One message from poll to ack. Being callable, it is its future's done-callback."""

    __slots__ = (
        "attempt", "completer", "engine_deaths", "last_error", "message", "payload",
        "settled", "stream", "system_faults",
    )

    def __init__(
        self, completer: Completer, stream: StreamState, message: Message,
        payload: TaskPayload | None,
    ) -> None:
        self.completer = completer
        self.stream = stream
        self.message = message
        self.payload = payload  # None: the message could not be decoded
        self.attempt = message.attempt
        self.last_error: str | None = None
        self.settled = False  # its in-flight slot was given back
        self.system_faults = 0  # system faults in a row (they cost no attempt)
        self.engine_deaths = 0  # engines that died while running it

    def __call__(self, future: asyncio.Future[TaskResult] | BaseException | None) -> None:
        self.completer.finish(self, future)


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

