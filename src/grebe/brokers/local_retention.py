"""Retention for the local log: old messages go, unconsumed ones never do.

Without it the embedded log grows forever (at 100 posts/s, hundreds of GB a day with the
output topic). Every `interval_s`, for each topic and partition, messages older than
`max_age_s` (or the topic's own age in `max_age_by_topic`: the output topic keeps an
hour by default), or beyond the newest `max_bytes`, are deleted — but never at or past the
lowest offset any consumer group has yet to commit on that partition, so retention can
delay nothing and lose nothing a group still needs. A group that has committed other
partitions of a topic but not this one protects the whole partition. Topics in `exempt`
(the dead-letter topic by default: those wait for a person) are never trimmed.

A row that a surviving row's value is stored against (local_refs: codec 2) is kept
with it, so retention never leaves a value that cannot be read.

Freed pages are reused by later appends, which bounds the file under a steady stream; a
log created by this version also returns them to the file system (incremental vacuum).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from grebe.sqlitedb import write_txn

if TYPE_CHECKING:
    from grebe.brokers.local import LocalLog

log = logging.getLogger(__name__)

VACUUM_PAGES = 2000  # pages returned to the file system per trim, so a trim stays short


@dataclass(frozen=True)
class RetentionPolicy:
    max_age_s: float | None = None  # delete messages appended longer ago than this
    max_bytes: int | None = None  # keep at most this many key+value bytes per partition
    exempt: frozenset[str] = frozenset()  # topic names never trimmed
    interval_s: float = 60.0
    # topic name -> its own max_age_s, in place of the log's
    max_age_by_topic: Mapping[str, float] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return (self.max_age_s is not None or self.max_bytes is not None
                or bool(self.max_age_by_topic))

    def max_age_of(self, topic: str) -> float | None:
        return self.max_age_by_topic.get(topic, self.max_age_s)


def _floor(conn: sqlite3.Connection, topic_id: int, part: int) -> int | None:
    """The lowest offset some consumer group still needs on this partition; None when no
    group reads the topic at all (then only age and size limit retention)."""
    groups = [g for (g,) in conn.execute(
        "SELECT DISTINCT grp FROM group_offsets WHERE topic_id = ?", (topic_id,))]
    if not groups:
        return None
    committed = dict(conn.execute(
        "SELECT grp, next_offset FROM group_offsets WHERE topic_id = ? AND part = ?",
        (topic_id, part)))
    return min(committed.get(g, 0) for g in groups)


def _size_cutoff(conn: sqlite3.Connection, topic_id: int, part: int, max_bytes: int) -> int:
    """The lowest offset to keep so the newest messages hold at most `max_bytes`."""
    kept = 0
    rows = conn.execute(
        "SELECT msg_offset, length(value) + coalesce(length(key), 0) FROM messages "
        "WHERE topic_id = ? AND part = ? ORDER BY msg_offset DESC", (topic_id, part))
    for offset, size in rows:
        kept += size
        if kept > max_bytes:
            return int(offset) + 1
    return 0


def _delete(conn: sqlite3.Connection, topic_id: int, part: int, condition: str,
            params: tuple[float | int, ...]) -> int:
    """Delete the partition's rows matching `condition`, except those a row that stays
    refers to (its value is stored against theirs)."""
    scope = "topic_id = ? AND part = ?"
    return conn.execute(
        f"DELETE FROM messages WHERE {scope} AND {condition} AND msg_offset NOT IN "
        f"(SELECT ref FROM messages WHERE {scope} AND ref IS NOT NULL AND NOT ({condition}))",
        (topic_id, part, *params, topic_id, part, *params)).rowcount


def trim(conn: sqlite3.Connection, policy: RetentionPolicy, now: float) -> dict[str, int]:
    """Delete what `policy` lets go; returns the number of messages deleted per topic."""
    deleted: dict[str, int] = {}
    partitions = conn.execute(
        "SELECT t.id, t.name, h.part FROM topics t JOIN heads h ON h.topic_id = t.id"
    ).fetchall()
    for topic_id, name, part in partitions:
        if name in policy.exempt:
            continue
        floor = _floor(conn, topic_id, part)
        limit = floor if floor is not None else None
        cutoffs = []
        if policy.max_bytes is not None:
            cutoffs.append(_size_cutoff(conn, topic_id, part, policy.max_bytes))
        max_age_s = policy.max_age_of(name)
        with write_txn(conn):
            count = 0
            if max_age_s is not None:
                count += _delete(
                    conn, topic_id, part,
                    "ts < ?" + ("" if limit is None else " AND msg_offset < ?"),
                    (now - max_age_s, *(() if limit is None else (limit,))))
            for cutoff in cutoffs:
                bound = cutoff if limit is None else min(cutoff, limit)
                count += _delete(conn, topic_id, part, "msg_offset < ?", (bound,))
        if count:
            deleted[name] = deleted.get(name, 0) + count
    if deleted and conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:  # incremental
        # executescript steps the pragma to its end: execute() (and fetchall(), as it
        # returns no columns) steps it once, which frees one page, not VACUUM_PAGES
        conn.executescript(f"PRAGMA incremental_vacuum({VACUUM_PAGES});")
    return deleted


class RetentionRunner:
    """Trims one log file every `policy.interval_s` from the process that consumes it.
    One runner per log path per process: each LocalSource asks `acquire`, and the last
    `release` stops it."""

    _running: ClassVar[dict[Path, RetentionRunner]] = {}

    def __init__(self, log_: LocalLog, policy: RetentionPolicy) -> None:
        self.log = log_
        self.policy = policy
        self.users = 0
        self.trimmed: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def acquire(cls, log_: LocalLog, policy: RetentionPolicy) -> RetentionRunner | None:
        if not policy.active:
            return None
        runner = cls._running.get(log_.path)
        if runner is None:
            runner = cls._running[log_.path] = cls(log_, policy)
            await log_.open()
            runner._task = asyncio.create_task(runner._loop(), name=f"retention:{log_.path}")
        runner.users += 1
        return runner

    async def release(self) -> None:
        self.users -= 1
        if self.users > 0:
            return
        self._running.pop(self.log.path, None)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.log.close()

    async def run_once(self) -> dict[str, int]:
        deleted = await self.log.trim(self.policy, time.time())
        for name, count in deleted.items():
            self.trimmed[name] = self.trimmed.get(name, 0) + count
        if deleted:
            log.info("retention trimmed %s from %s", deleted, self.log.path)
        return deleted

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:  # a failed trim is retried next interval; it never stops intake
                log.exception("retention of %s failed", self.log.path)
            await asyncio.sleep(self.policy.interval_s)
