"""The embedded default broker: a durable, partitioned log in one SQLite file.

Topics have N partitions; a record goes to the partition its key hashes to (CRC-32, so
every process agrees), or round-robin without a key. Each partition is an append-only
sequence of offsets 0, 1, 2, ... Consumer groups store, per partition, the offset of the
next record to read, exactly as Kafka does.

Durability. The file is in WAL mode with synchronous=NORMAL by default: a transaction is
written to the WAL before COMMIT returns, so `kill -9` at any instant loses nothing that
was committed and cannot corrupt the file (SQLite recovers the WAL on the next open).
NORMAL skips only the fsync, which protects against power loss and kernel crashes;
`local.synchronous: FULL` adds it. A dead letter is written in the same transaction as the
offset commit that passes it, so a commit can never skip a message that is neither done
nor dead-lettered, and a dead message yields exactly one dead-letter record.

Waiting for data. A consumer in the same process as the producer is woken by the
producer right after its commit (no polling at all). A consumer in another process
re-reads the log after 2 ms, doubling up to 100 ms while the log stays idle (an empty
read is one index probe per partition), and returns to 2 ms as soon as data flows.

Threads. Each LocalLog owns one connection in its own thread; reads, appends and commits
are whole batches there, so the event loop never blocks on SQLite.

Files. This module is the log (LocalLog) and its Source; the tables and SQL are
local_sql.py, the Producer local_producer.py, the consumer lock local_lock.py, retention
local_retention.py, dead-letter access local_dlq.py, the backend local_backend.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from grebe import constants as C
from grebe.brokers import local_sql as sql
from grebe.brokers.local_lock import ConsumerLock
from grebe.brokers.local_producer import LocalProducer
from grebe.brokers.local_refs import ValueRefs
from grebe.brokers.local_retention import RetentionPolicy, RetentionRunner, trim
from grebe.brokers.local_sql import (
    PartitionedBatch,
    Record,
    StoredRecord,
    Topic,
    partition_for,
)
from grebe.core.offsets import OffsetTracker
from grebe.core.source import Message, Outcome
from grebe.errors import BrokerError, BrokerUnavailableError
from grebe.sqlitedb import SqliteDB

__all__ = [  # the log's parts live in local_*.py; one import for callers and tests
    "ConsumerLock", "LocalLog", "LocalProducer", "LocalSource", "Record", "StoredRecord",
    "Topic", "partition_for",
]
R = TypeVar("R")
log = logging.getLogger(__name__)

# --- in-process wake-ups ----------------------------------------------------------------


class _Notifier:
    """Wakes consumers of (file, topic) in this process right after a producer commits.

    Consumers arm a future before reading, so a commit between their read and their
    wait is never missed. Futures may belong to other threads' loops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[tuple[str, str], set[asyncio.Future[None]]] = {}

    def arm(self, path: Path, topic: str) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._waiters.setdefault((str(path), topic), set()).add(future)
        return future

    def disarm(self, path: Path, topic: str, future: asyncio.Future[None]) -> None:
        with self._lock:
            waiters = self._waiters.get((str(path), topic))
            if waiters is not None:
                waiters.discard(future)
                if not waiters:
                    del self._waiters[(str(path), topic)]

    def notify(self, path: Path, topics: Iterable[str]) -> None:
        with self._lock:
            woken = [f for t in topics for f in self._waiters.pop((str(path), t), ())]
        for future in woken:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits
                future.get_loop().call_soon_threadsafe(_wake, future)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


_notifier = _Notifier()


# --- the log ------------------------------------------------------------------------------


class LocalLog:
    """Async access to the log file through one connection in its own thread."""

    def __init__(
        self, path: Path, *, partitions: int = C.DEFAULT_LOCAL_PARTITIONS,
        synchronous: Literal["NORMAL", "FULL"] = C.DEFAULT_LOCAL_SYNCHRONOUS,
        compress: bool = True,
    ) -> None:
        self.path = Path(path).resolve()
        self.default_partitions = partitions
        self.compress = compress  # store values zstd-compressed (local_sql.pack_value)
        # ...and against an earlier value of the same key (local_refs), when compressing
        self._refs = ValueRefs() if compress else None
        self._db = SqliteDB(self.path, synchronous=synchronous, name="grebe-log",
                            new_file_pragmas=sql.NEW_LOG_PRAGMAS)
        self._topics: dict[str, Topic] = {}
        self._round_robin = itertools.count()

    async def open(self) -> None:
        try:
            await self._db.open(sql.init_schema)
        except sqlite3.Error as exc:
            raise BrokerError(f"cannot open local log {self.path}: {exc}") from exc

    async def close(self) -> None:
        await self._db.close()

    async def topic(self, name: str, partitions: int | None = None) -> Topic:
        """The topic, created with `partitions` (default: the log's) if it is new. An
        existing topic keeps the partition count it was created with."""
        topic = self._topics.get(name)
        if topic is None:
            topic = await self._db.run(
                sql.ensure_topic, name, partitions or self.default_partitions
            )
            self._topics[name] = topic
        return topic

    async def find_topic(self, name: str) -> Topic | None:
        return self._topics.get(name) or await self._db.run(sql.find_topic, name)

    async def _partitioned(
        self, batches: Mapping[str, Sequence[Record]]
    ) -> list[PartitionedBatch]:
        """{topic name: records} -> (topic id, (partition, key, value) records) batches."""
        prepared: list[PartitionedBatch] = []
        for name, records in batches.items():
            topic = await self.topic(name)
            prepared.append((
                topic.id,
                [
                    (partition_for(key, topic.partitions, self._round_robin), key, value)
                    for key, value in records
                ],
            ))
        return prepared

    async def append(self, topic_name: str, records: Sequence[Record]) -> list[tuple[int, int]]:
        """Append records in one transaction; returns their (partition, offset)."""
        if not records:
            return []
        batch = await self._partitioned({topic_name: records})
        positions = (await self._run_write(sql.append, batch, self.compress, self._refs))[0]
        _notifier.notify(self.path, [topic_name])
        return positions

    async def append_many(self, batches: dict[str, list[Record]]) -> None:
        """Append to several topics in one transaction."""
        prepared = await self._partitioned(batches)
        if prepared:
            await self._run_write(sql.append, prepared, self.compress, self._refs)
            _notifier.notify(self.path, list(batches))

    async def read(
        self, topic_name: str, positions: Sequence[tuple[int, int]], limit: int
    ) -> list[StoredRecord]:
        """Up to `limit` records from (partition, first offset) positions, in that order."""
        rows = await self.read_rows(topic_name, positions, limit)
        return [StoredRecord(topic_name, *row) for row in rows]

    async def read_rows(
        self, topic_name: str, positions: Sequence[tuple[int, int]], limit: int
    ) -> list[tuple[int, int, bytes | None, bytes, float]]:
        """`read` as plain (partition, offset, key, value, timestamp) rows: the consumer's
        hot path builds its messages straight from them."""
        topic = await self.topic(topic_name)
        try:
            return await self._db.run(sql.read, topic.id, positions, limit)
        except ValueError as exc:  # a value this version cannot unpack: not the post's fault
            raise BrokerError(f"local log {self.path}, topic {topic_name}: {exc}") from exc

    async def committed(self, group: str, topic_name: str) -> dict[int, int]:
        topic = await self.topic(topic_name)
        return await self._db.run(sql.committed, group, topic.id)

    async def end_offsets(self, topic_name: str) -> dict[int, int]:
        topic = await self.topic(topic_name)
        return await self._db.run(sql.end_offsets, topic.id)

    async def lag(self, group: str, topic_name: str) -> int:
        """Records of the topic the group has not committed yet."""
        ends = await self.end_offsets(topic_name)
        committed = await self.committed(group, topic_name)
        return sum(end - committed.get(part, 0) for part, end in ends.items())

    async def commit(
        self, group: str, topic_name: str, offsets: dict[int, int],
        appends: dict[str, list[Record]] | None = None,
    ) -> None:
        """Store the group's offsets, appending `appends` in the same transaction.

        Offsets never move backwards (a stale committer cannot undo progress)."""
        topic = await self.topic(topic_name)
        prepared = await self._partitioned(appends or {})
        await self._run_write(sql.commit, group, topic.id, offsets, prepared, self.compress,
                              self._refs)
        if prepared:
            _notifier.notify(self.path, list(appends or {}))

    async def trim(self, policy: RetentionPolicy, now: float) -> dict[str, int]:
        """Apply a retention policy (see local_retention); messages deleted per topic."""
        return await self._run_write(trim, policy, now)

    async def _run_write(self, fn: Callable[..., R], *args: Any) -> R:
        try:
            return await self._db.run(fn, *args)
        except sqlite3.OperationalError as exc:  # disk full, locked, I/O: a system fault
            raise BrokerUnavailableError(f"local log {self.path}: {exc}") from exc
        except sqlite3.Error as exc:
            raise BrokerError(f"local log {self.path}: {exc}") from exc


# --- source ---------------------------------------------------------------------------------


class LocalSource:
    """A consumer-group reader of one local-log topic implementing core.source.Source.

    Acks only mark offsets finished; a committer task stores the committable offsets
    (never past an unfinished message) in batches: when `commit_batch` acks are pending,
    or `commit_interval_s` after the first one. Dead letters are written in the commit
    transaction that passes them."""

    handles_retry = False

    def __init__(
        self, name: str, log: LocalLog, *, topic: str, group: str = C.DEFAULT_CONSUMER_GROUP,
        dead_letter_topic: str = C.DEFAULT_DEAD_LETTER_TOPIC,
        commit_interval_s: float = C.DEFAULT_COMMIT_INTERVAL_S,
        commit_batch: int = C.DEFAULT_COMMIT_BATCH,
        lock_wait_s: float = C.CONSUMER_LOCK_TIMEOUT_S,
        retention: RetentionPolicy | None = None,
    ) -> None:
        self.name = name
        self._retention_policy = retention
        self._retention: RetentionRunner | None = None
        self._lock_wait_s = lock_wait_s
        self.topic = topic
        self.group = group
        self._log = log
        self._dead_letter_topic = dead_letter_topic
        self._commit_interval_s = commit_interval_s
        self._commit_batch = commit_batch
        self._lock = ConsumerLock(log.path, group, topic)
        self._tracker = OffsetTracker()
        self._positions: dict[int, int] = {}
        self._rotation = 0
        # Dead letters waiting for the commit that passes them: {(partition, offset): record}.
        self._dead: dict[tuple[int, int], Record] = {}
        self._pending_acks = 0
        self._dirty = asyncio.Event()
        self._full = asyncio.Event()
        self._committer: asyncio.Task[None] | None = None
        self._commit_lock = asyncio.Lock()
        self._committed: dict[int, int] = {}
        self._commit_made = asyncio.Event()
        self._started = False

    async def start(self) -> None:
        await self._lock.acquire(self._lock_wait_s)
        try:
            await self._log.open()
            topic = await self._log.topic(self.topic)
            await self._log.topic(self._dead_letter_topic, C.DEFAULT_DEAD_LETTER_PARTITIONS)
            committed = await self._log.committed(self.group, self.topic)
            positions = {p: committed.get(p, 0) for p in range(topic.partitions)}
            if positions != committed:
                # Register the group on every partition before it reads anything, so
                # retention keeps what a new consumer has yet to read (local_retention).
                await self._log.commit(self.group, self.topic, positions)
        except BaseException:
            self._lock.release()
            raise
        self._positions = positions
        for part, offset in committed.items():
            self._tracker.mark_committed(part, offset)
        self._committed = dict(committed)
        self._committer = asyncio.create_task(self._commit_loop(), name=f"commit:{self.name}")
        if self._retention_policy is not None:
            self._retention = await RetentionRunner.acquire(
                LocalLog(self._log.path), self._retention_policy)
        self._started = True

    async def stop(self) -> None:
        """Commit what is finished, then close. Unfinished messages stay uncommitted."""
        if not self._started:
            return
        self._started = False
        if self._retention is not None:
            await self._retention.release()
            self._retention = None
        if self._committer is not None:
            self._committer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._committer
        try:
            await self.commit()
        finally:
            await self._log.close()
            self._lock.release()

    async def poll(self, max_messages: int, timeout: float) -> list[Message]:  # noqa: ASYNC109
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        delay = C.LOCAL_POLL_MIN_S
        while True:
            wake = _notifier.arm(self._log.path, self.topic)
            try:
                messages = await self._read(max_messages)
                remaining = deadline - loop.time()
                if messages or remaining <= 0:
                    return messages
                # In process: the producer wakes us. Otherwise: re-read with backoff.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake, min(delay, remaining))
                delay = min(delay * 2, C.LOCAL_POLL_MAX_S)
            finally:
                _notifier.disarm(self._log.path, self.topic, wake)

    async def _read(self, max_messages: int) -> list[Message]:
        parts = sorted(self._positions.items())
        # Start from a different partition each time so none is starved by a busy one.
        self._rotation = (self._rotation + 1) % len(parts)
        order = parts[self._rotation:] + parts[: self._rotation]
        rows = await self._log.read_rows(self.topic, order, max_messages)
        track, name, positions = self._tracker.track, self.name, self._positions
        messages = []
        for part, offset, key, value, ts in rows:
            track(part, offset)
            positions[part] = offset + 1
            messages.append(
                Message(
                    source=name, value=value, partition=part, offset=offset, key=key,
                    timestamp=ts,
                )
            )
        return messages

    async def ack(
        self, message: Message, outcome: Outcome, *, reason: str | None = None,
        dead_letter: bytes | None = None,
    ) -> None:
        if outcome is Outcome.RETRY:
            raise BrokerError(f"{self.name}: the local broker does not redeliver on RETRY")
        if outcome is Outcome.DEAD:
            if dead_letter is None:
                raise BrokerError(f"{self.name}: DEAD outcome needs the dead_letter record")
            self._dead[(message.partition, message.offset)] = (message.key, dead_letter)
        self._tracker.finish(message.partition, message.offset)
        self._pending_acks += 1
        self._dirty.set()
        if self._pending_acks >= self._commit_batch:
            self._full.set()

    async def commit(self) -> None:
        """Store every committable offset now, with the dead letters it passes.

        Shielded: the transaction runs in a thread and cannot be called back, so a
        cancelled caller (stop() cancelling the committer) must not skip the
        bookkeeping after it, or the next commit would append its dead letters again."""
        await asyncio.shield(self._commit_locked())

    async def _commit_locked(self) -> None:
        async with self._commit_lock:
            offsets = self._tracker.committable()
            if not offsets:
                return
            self._pending_acks = 0
            passed = [
                key for key in self._dead if key[1] < offsets.get(key[0], key[1])
            ]
            appends = (
                {self._dead_letter_topic: [self._dead[key] for key in passed]} if passed else None
            )
            await self._log.commit(self.group, self.topic, offsets, appends)
            for key in passed:
                del self._dead[key]
            for part, offset in offsets.items():
                self._tracker.mark_committed(part, offset)
            self._committed.update(offsets)
            self._commit_made.set()
            self._commit_made = asyncio.Event()

    async def _commit_loop(self) -> None:
        while True:
            await self._dirty.wait()
            # Let acks accumulate into one transaction, unless a full batch is waiting.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._full.wait(), self._commit_interval_s)
            self._dirty.clear()
            self._full.clear()
            try:
                await self.commit()
            except Exception:
                # Kept in the tracker: the next commit retries. Back off so a locked or
                # failing file does not spin.
                log.exception("%s: offset commit failed; will retry", self.name)
                self._dirty.set()
                await asyncio.sleep(self._commit_interval_s or 0.05)

    async def lag(self) -> int:
        """Records of the topic not handed out yet (the dispatcher reports it)."""
        ends = await self._log.end_offsets(self.topic)
        return sum(max(0, end - self._positions.get(p, 0)) for p, end in ends.items())

    async def end_offsets(self) -> dict[int, int]:
        return await self._log.end_offsets(self.topic)

    async def wait_committed(self, target: dict[int, int]) -> None:
        """Return once this consumer has committed at least `target` (partition: next
        offset), e.g. the end of the topic when a batch job started. Woken per commit."""
        while any(self._committed.get(p, 0) < offset for p, offset in target.items()):
            await self._commit_made.wait()

    def lowest_unfinished(self) -> dict[int, int | None]:
        """Per partition, the offset holding commits back (diagnostics)."""
        return {p: self._tracker.lowest_unfinished(p) for p in self._positions}
