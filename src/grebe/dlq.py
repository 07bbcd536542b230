"""Dead letters on the local log: list them, replay them exactly once.

Replay keeps its own consumer group (DLQ_REPLAY_GROUP) on the dead-letter topic. The
originals are appended to their streams' topics in the same SQLite transaction that
advances that group's offset, so a replay interrupted at any point (kill -9 included)
neither loses nor repeats a dead letter, and a second `grebe dlq replay` only sends
what arrived since.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from grebe import constants as C
from grebe.brokers.factory import local_log
from grebe.brokers.local import Record
from grebe.codec import decode_dead_letter
from grebe.config import GrebeConfig
from grebe.errors import ConfigError
from grebe.types import DeadLetter

REPLAY_BATCH = 500


@dataclass(frozen=True)
class DeadLetterEntry:
    offset: int  # position on the dead-letter topic
    record: DeadLetter | None  # None: the entry itself is unreadable
    replayed: bool
    error: str | None = None


@dataclass
class ReplayReport:
    replayed: int = 0
    skipped: int = 0  # unreadable, or from a stream no longer configured
    reasons: list[str] = field(default_factory=list)


def _check_local(config: GrebeConfig) -> None:
    if any(s.broker != "local" for s in config.streams):
        raise ConfigError("`grebe dlq` works on the local broker's dead-letter topic only")


def _decode(raw: bytes) -> tuple[DeadLetter | None, str | None]:
    try:
        return decode_dead_letter(raw), None
    except msgspec.DecodeError as exc:
        return None, f"unreadable dead letter: {exc}"


async def list_dead_letters(config: GrebeConfig, limit: int = 50) -> list[DeadLetterEntry]:
    """The newest `limit` dead letters, oldest first."""
    _check_local(config)
    topic = config.dispatcher.dead_letter_topic
    log = local_log(config)
    await log.open()
    try:
        await log.topic(topic, C.DEFAULT_DEAD_LETTER_PARTITIONS)
        end = (await log.end_offsets(topic)).get(0, 0)
        replayed_to = (await log.committed(C.DLQ_REPLAY_GROUP, topic)).get(0, 0)
        first = max(0, end - limit)
        records = await log.read(topic, [(0, first)], limit)
    finally:
        await log.close()
    entries = []
    for record in records:
        dead, error = _decode(record.value)
        entries.append(DeadLetterEntry(record.offset, dead, record.offset < replayed_to, error))
    return entries


async def replay(config: GrebeConfig) -> ReplayReport:
    """Re-append every dead letter not replayed yet to its stream's topic."""
    _check_local(config)
    topics = {s.name: s.topic for s in config.streams}
    topic = config.dispatcher.dead_letter_topic
    report = ReplayReport()
    log = local_log(config)
    await log.open()
    try:
        await log.topic(topic, C.DEFAULT_DEAD_LETTER_PARTITIONS)
        position = (await log.committed(C.DLQ_REPLAY_GROUP, topic)).get(0, 0)
        while records := await log.read(topic, [(0, position)], REPLAY_BATCH):
            appends: dict[str, list[Record]] = {}
            for record in records:
                dead, error = _decode(record.value)
                if dead is not None and dead.source not in topics:
                    error = f"stream {dead.source!r} is not configured"
                if dead is None or error is not None:
                    report.skipped += 1
                    report.reasons.append(f"offset {record.offset}: {error}")
                    continue
                target = topics[dead.source]
                appends.setdefault(target, []).append((dead.key, dead.original))
                report.replayed += 1
            position = records[-1].offset + 1
            await log.commit(C.DLQ_REPLAY_GROUP, topic, {0: position}, appends)
    finally:
        await log.close()
    return report
