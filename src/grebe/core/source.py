"""The Source protocol: how the dispatcher talks to any broker.

A source hands out batches of raw messages and is told, once per message, how it ended.
It must not consider a message consumed (commit an offset, ack a delivery) before that.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Sequence
from typing import Protocol, runtime_checkable

import msgspec


class Outcome(enum.StrEnum):
    DONE = "done"  # processed (or deliberately skipped): commit / ack
    RETRY = "retry"  # only sent to sources with handles_retry=True: redeliver later
    DEAD = "dead"  # gave up: the source dead-letters it, then commits / acks


class Message(msgspec.Struct, kw_only=True):
    """One raw message as delivered. (source, partition, offset) identifies it."""

    source: str
    value: bytes
    partition: int = 0
    offset: int = 0
    key: bytes | None = None
    attempt: int = 1  # deliveries so far, where the broker knows (RabbitMQ retry queues)
    timestamp: float = 0.0
    token: object | None = None  # broker-specific handle (e.g. an AMQP delivery tag)


@runtime_checkable
class Source(Protocol):
    """A stream of messages from one broker topic or queue."""

    name: str
    #: True when the broker redelivers on Outcome.RETRY itself (RabbitMQ delay queues);
    #: otherwise the dispatcher keeps the message and retries it after a backoff.
    handles_retry: bool

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def poll(self, max_messages: int, timeout: float) -> list[Message]:  # noqa: ASYNC109
        """Up to max_messages, waiting at most timeout seconds for the first one.

        Waiting must block on the broker or an event, never sleep-poll in a tight loop."""
        ...

    async def ack(
        self, message: Message, outcome: Outcome, *, reason: str | None = None,
        dead_letter: bytes | None = None,
    ) -> None:
        """Finish a message. For DEAD, `dead_letter` is the encoded DeadLetter record the
        source must store on its dead-letter topic/queue before it commits."""
        ...


# Optional capabilities of a source, checked with isinstance (not getattr by name).


@runtime_checkable
class ReportsLag(Protocol):
    """A source that can say how much of its stream it has not handed out yet (the lag
    gauge); memory sources answer at once, brokers after a round trip."""

    def lag(self) -> int | Awaitable[int]: ...


@runtime_checkable
class ReportsCommitted(Protocol):
    """A log-backed source that can tell when it has committed up to a point: for batch
    runs (`grebe run --exit-when-done`, the demo) that stop once caught up."""

    async def end_offsets(self) -> dict[int, int]: ...

    async def wait_committed(self, target: dict[int, int]) -> None: ...


@runtime_checkable
class ReportsDrained(Protocol):
    """A queue-backed source (no offsets) that can tell when its queue is drained and
    nothing it handed out is still unfinished."""

    async def wait_drained(self) -> None: ...


@runtime_checkable
class Producer(Protocol):
    """Publishes to a broker topic (output and dead-letter topics), so sinks need not know
    which broker is behind it. `publish` returns once the record is durably stored."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def publish(self, topic: str, key: bytes | None, value: bytes) -> None: ...

    async def publish_many(
        self, topic: str, records: Sequence[tuple[bytes | None, bytes]]
    ) -> None: ...


def can_report_caught_up(source: object) -> bool:
    """Whether a batch job can tell when `source` has processed all it held."""
    return isinstance(source, ReportsDrained | ReportsCommitted)
