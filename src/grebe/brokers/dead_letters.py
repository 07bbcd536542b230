"""Dead-letter access, the part of each broker backend that `grebe dlq` drives.

A backend stores dead-letter records (msgspec JSON of `grebe.types.DeadLetter`) where
its sources put them: the local log's and Kafka's dead-letter topic, RabbitMQ's
dead-letter queue. It knows how to show them and how to replay them *exclusively*: two
replays running at once never send the same dead letter twice (each backend says how).
What a record means, and where it goes back to, is decided by the caller's `Router`, so
backends stay bytes in, bytes out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class StoredDeadLetter:
    """One dead-letter record as stored. `replayed` is known only where replayed records
    stay (the logs); a RabbitMQ queue loses what it replayed, so there it is False."""

    partition: int
    offset: int  # position in the dead-letter topic/queue (RabbitMQ: order of arrival)
    value: bytes
    replayed: bool = False


@dataclass(frozen=True)
class Replay:
    """Where a dead letter goes back to: its stream's topic (or queue), key and bytes."""

    topic: str
    key: bytes | None
    value: bytes


#: The caller's decision on one record: a Replay, or the reason it is skipped.
Router = Callable[[bytes], Replay | str]


@dataclass
class ReplayReport:
    replayed: int = 0
    skipped: int = 0  # unreadable, or from a stream no longer configured
    reasons: list[str] = field(default_factory=list)

    def skip(self, where: str, reason: str) -> None:
        self.skipped += 1
        self.reasons.append(f"{where}: {reason}")

    def merge(self, other: ReplayReport) -> None:
        self.replayed += other.replayed
        self.skipped += other.skipped
        self.reasons.extend(other.reasons)


class DeadLetterAccess(Protocol):
    """The dead letters of one broker."""

    async def peek(self, limit: int) -> list[StoredDeadLetter]:
        """Up to `limit` records, oldest first, without consuming them."""
        ...

    async def replay(self, route: Router, limit: int | None = None) -> ReplayReport:
        """Send every record not replayed yet (at most `limit`) where `route` says, each
        once even with another replay running. Skipped records are not sent again by a
        later replay on the logs (their position is passed); RabbitMQ keeps them queued."""
        ...
