"""The local log's tables and the SQL on them, run in a LocalLog's thread (local.py).

Each function is one whole batch in one transaction (or one read), so the event loop
never waits on SQLite and a crash leaves either all of a batch or none of it.
"""

from __future__ import annotations

import itertools
import sqlite3
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from grebe.sqlitedb import write_txn

Record = tuple[bytes | None, bytes]  # (key, value)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS topics (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    partitions INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS heads (
    topic_id INTEGER NOT NULL,
    part INTEGER NOT NULL,
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic_id, part)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS messages (
    topic_id INTEGER NOT NULL,
    part INTEGER NOT NULL,
    msg_offset INTEGER NOT NULL,
    key BLOB,
    value BLOB NOT NULL,
    ts REAL NOT NULL,
    PRIMARY KEY (topic_id, part, msg_offset)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS group_offsets (
    grp TEXT NOT NULL,
    topic_id INTEGER NOT NULL,
    part INTEGER NOT NULL,
    next_offset INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (grp, topic_id, part)
) WITHOUT ROWID;
"""


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record as stored in the log."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp: float


@dataclass(frozen=True, slots=True)
class Topic:
    id: int
    name: str
    partitions: int


def partition_for(key: bytes | None, partitions: int, counter: itertools.count[int]) -> int:
    """The partition of a key: stable across processes and runs (CRC-32, not hash())."""
    if key is None:
        return next(counter) % partitions
    return zlib.crc32(key) % partitions



# Set on a new log file before it turns WAL (sqlitedb.connect; set later, SQLite ignores
# them): space freed by retention goes back to the file system (local_retention), and
# 8 KB pages keep a message of up to ~2 KB in its b-tree page: `messages` is WITHOUT
# ROWID, so at 4 KB pages any row over ~1 KB (an annotation with its vector) spilled to
# an overflow page of its own, mostly empty (12.1 KB on disk per post for 5.3 KB of
# messages; 5.8 KB at 8 KB pages: docs/benchmarks.md).
NEW_LOG_PRAGMAS = ("page_size = 8192", "auto_vacuum = INCREMENTAL")


def init_schema(conn: sqlite3.Connection) -> None:
    conn.executescript(_SCHEMA)


def find_topic(conn: sqlite3.Connection, name: str) -> Topic | None:
    row = conn.execute("SELECT id, partitions FROM topics WHERE name = ?", (name,)).fetchone()
    return None if row is None else Topic(id=row[0], name=name, partitions=row[1])


def ensure_topic(conn: sqlite3.Connection, name: str, partitions: int) -> Topic:
    topic = find_topic(conn, name)
    if topic is None:
        with write_txn(conn):
            conn.execute(
                "INSERT INTO topics (name, partitions) VALUES (?, ?) ON CONFLICT DO NOTHING",
                (name, partitions),
            )
        topic = find_topic(conn, name)
        assert topic is not None  # inserted above, or by a concurrent creator
    return topic


def append_rows(
    conn: sqlite3.Connection, topic_id: int, records: Sequence[tuple[int, bytes | None, bytes]],
    now: float,
) -> list[tuple[int, int]]:
    """Append (partition, key, value) records inside the caller's write transaction."""
    heads = end_offsets(conn, topic_id)
    rows = []
    positions = []
    for part, key, value in records:
        offset = heads.get(part, 0)
        heads[part] = offset + 1
        rows.append((topic_id, part, offset, key, value, now))
        positions.append((part, offset))
    conn.executemany(
        "INSERT INTO messages (topic_id, part, msg_offset, key, value, ts) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        rows,
    )
    conn.executemany(
        "INSERT INTO heads (topic_id, part, next_offset) VALUES (?, ?, ?) "
        "ON CONFLICT (topic_id, part) DO UPDATE SET next_offset = excluded.next_offset",
        [(topic_id, part, offset) for part, offset in heads.items()],
    )
    return positions


PartitionedBatch = tuple[int, Sequence[tuple[int, bytes | None, bytes]]]  # topic id, records


def append(
    conn: sqlite3.Connection, batches: Sequence[PartitionedBatch]
) -> list[list[tuple[int, int]]]:
    now = time.time()
    with write_txn(conn):
        return [append_rows(conn, topic_id, records, now) for topic_id, records in batches]


def read(
    conn: sqlite3.Connection, topic_id: int, positions: Sequence[tuple[int, int]], limit: int
) -> list[tuple[int, int, bytes | None, bytes, float]]:
    """Up to `limit` records, filling from the partitions in the order given."""
    out: list[tuple[int, int, bytes | None, bytes, float]] = []
    # One read transaction, so every partition is read from the same snapshot.
    conn.execute("BEGIN")
    try:
        for part, offset in positions:
            remaining = limit - len(out)
            if remaining <= 0:
                break
            out.extend(
                conn.execute(
                    "SELECT part, msg_offset, key, value, ts FROM messages "
                    "WHERE topic_id = ? AND part = ? AND msg_offset >= ? "
                    "ORDER BY msg_offset LIMIT ?",
                    (topic_id, part, offset, remaining),
                )
            )
    finally:
        conn.execute("COMMIT")
    return out


def committed(conn: sqlite3.Connection, group: str, topic_id: int) -> dict[int, int]:
    return dict(
        conn.execute(
            "SELECT part, next_offset FROM group_offsets WHERE grp = ? AND topic_id = ?",
            (group, topic_id),
        )
    )


def end_offsets(conn: sqlite3.Connection, topic_id: int) -> dict[int, int]:
    return dict(
        conn.execute("SELECT part, next_offset FROM heads WHERE topic_id = ?", (topic_id,))
    )


def commit(
    conn: sqlite3.Connection, group: str, topic_id: int, offsets: dict[int, int],
    appends: Sequence[PartitionedBatch],
) -> None:
    """Append records (dead letters, replays) and store offsets in one transaction."""
    now = time.time()
    with write_txn(conn):
        for append_topic, records in appends:
            append_rows(conn, append_topic, records, now)
        conn.executemany(
            "INSERT INTO group_offsets (grp, topic_id, part, next_offset, updated_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (grp, topic_id, part) DO UPDATE SET "
            "next_offset = max(next_offset, excluded.next_offset), "
            "updated_at = excluded.updated_at",
            [(group, topic_id, part, offset, now) for part, offset in offsets.items()],
        )
