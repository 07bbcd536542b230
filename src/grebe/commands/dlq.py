"""`grebe dlq`: list dead letters and replay them, on every broker the streams use.

Each broker keeps its own dead letters (the sources of its streams write them) and
knows how to replay them exclusively (`grebe.brokers.dead_letters`). This module decides
what a record means: it decodes the DeadLetter, and sends its `original` back to the
topic (or queue) of the stream named by its `source`, on the same broker. Records that
cannot be read, or whose stream is no longer configured on that broker, are skipped
with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from grebe.brokers.dead_letters import Replay, ReplayReport
from grebe.brokers.factory import build_dead_letters
from grebe.codec import decode_dead_letter
from grebe.config import GrebeConfig
from grebe.types import DeadLetter

__all__ = ["DeadLetterEntry", "ReplayReport", "list_dead_letters", "replay"]


@dataclass(frozen=True)
class DeadLetterEntry:
    broker: str
    partition: int  # of the dead-letter topic
    offset: int  # position on the dead-letter topic (RabbitMQ: order in the queue)
    record: DeadLetter | None  # None: the entry itself is unreadable
    replayed: bool
    error: str | None = None


def _brokers(config: GrebeConfig) -> list[str]:
    """The brokers of the configured streams, in config order, each once."""
    return list(dict.fromkeys(s.broker for s in config.streams))


def _decode(raw: bytes) -> tuple[DeadLetter | None, str | None]:
    try:
        return decode_dead_letter(raw), None
    except (msgspec.MsgspecError, ValueError, RecursionError) as exc:
        return None, f"unreadable dead letter: {exc}"


async def list_dead_letters(config: GrebeConfig, limit: int = 50) -> list[DeadLetterEntry]:
    """Up to `limit` dead letters per broker (the newest on the logs), oldest first."""
    entries = []
    for broker in _brokers(config):
        for stored in await build_dead_letters(broker, config).peek(limit):
            dead, error = _decode(stored.value)
            entries.append(DeadLetterEntry(
                broker, stored.partition, stored.offset, dead, stored.replayed, error
            ))
    return entries


async def replay(config: GrebeConfig, limit: int | None = None) -> ReplayReport:
    """Send every dead letter not replayed yet (at most `limit` per broker) back to its
    stream's topic. Exclusive: run twice at once, each dead letter is sent once."""
    report = ReplayReport()
    for broker in _brokers(config):
        topics = {s.name: s.topic for s in config.streams if s.broker == broker}

        def route(raw: bytes, topics: dict[str, str] = topics) -> Replay | str:
            dead, error = _decode(raw)
            if dead is None:
                return error or "unreadable dead letter"
            if dead.source not in topics:
                return f"stream {dead.source!r} is not configured"
            return Replay(topics[dead.source], dead.key, dead.original)

        part = await build_dead_letters(broker, config).replay(route, limit)
        report.merge(part)
    return report
