"""The local log's tables and the SQL on them, run in a LocalLog's thread (local.py).

Each function is one whole batch in one transaction (or one read), so the event loop
never waits on SQLite and a crash leaves either all of a batch or none of it.

Values are stored compressed (zstd against a packaged dictionary trained on real posts
and annotations: the output topic's 5.1 KB of JSON per post of six flows take ~2 KB)
when that makes them smaller; the `codec` column says how each row's value is stored,
so rows of a log written before compression (the column added on open: the migration,
0 for them) and values that did not shrink stay as they were. Readers get the bytes
that were appended, whatever their form at rest; retention's `max_bytes` counts the
bytes at rest.

A keyed value may instead be stored against the previous value of its key that is
stored on its own (codec 2, `ref` its offset; local_refs.py): the output topic's several
annotations of one post repeat each other. Rows of a log written before (the `ref` column
added on open) have none.
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from grebe import constants as C
from grebe.brokers.local_refs import ValueRefs, expand
from grebe.sqlitedb import write_txn
from grebe.zdict import DictCodec

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
    codec INTEGER NOT NULL DEFAULT 0,
    ref INTEGER,
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


# How a row's value is stored (the `codec` column).
VALUE_RAW = 0  # as appended
VALUE_ZSTD = 1  # a zstd frame against the log dictionary the frame names
VALUE_ZSTD_REF = 2  # a zstd frame against the value of the row at offset `ref`
# Migration of a log written before compressed values: its rows are raw.
_ADD_CODEC = "ALTER TABLE messages ADD COLUMN codec INTEGER NOT NULL DEFAULT 0"
# ...and of one written before referencing values: none of its rows refers to another.
_ADD_REF = "ALTER TABLE messages ADD COLUMN ref INTEGER"
_values = DictCodec(C.LOG_DICT_PREFIX, C.LOG_DICT_ID, C.LOG_ZSTD_LEVEL)


def init_schema(conn: sqlite3.Connection) -> None:
    conn.executescript(_SCHEMA)
    for column, migration in (("codec", _ADD_CODEC), ("ref", _ADD_REF)):
        if not _has_column(conn, column):
            with write_txn(conn):  # under the write lock: another process may have done it
                if not _has_column(conn, column):
                    conn.execute(migration)


def _has_column(conn: sqlite3.Connection, column: str) -> bool:
    return column in {row[1] for row in conn.execute("PRAGMA table_info(messages)")}


def pack_value(value: bytes, compress: bool) -> tuple[bytes, int]:
    """(bytes at rest, codec) of a value: compressed when that makes it smaller."""
    if compress:
        packed = _values.compress(value)
        if len(packed) < len(value):
            return packed, VALUE_ZSTD
    return value, VALUE_RAW


def unpack_value(stored: bytes, codec: int, referent: bytes | None = None) -> bytes:
    """The value as appended (`referent`: the value, as appended, of the row a codec-2
    row refers to); ValueError for a codec or dictionary this version does not know (a
    log written by a newer one) or a corrupt frame."""
    if codec == VALUE_RAW:
        return stored
    if codec == VALUE_ZSTD:
        return _values.decompress(stored)
    if codec == VALUE_ZSTD_REF:
        if referent is None:
            raise ValueError("local log value stored against another row, not given")
        return expand(stored, referent)
    raise ValueError(f"local log value stored with unknown codec {codec}")


def _referent(conn: sqlite3.Connection, topic_id: int, part: int, offset: int) -> bytes:
    row = conn.execute(
        "SELECT value, codec FROM messages WHERE topic_id = ? AND part = ? AND msg_offset = ?",
        (topic_id, part, offset)).fetchone()
    if row is None or row[1] == VALUE_ZSTD_REF:
        raise ValueError(f"local log: the row at offset {offset} a value refers to is gone")
    return unpack_value(row[0], row[1])


@contextlib.contextmanager
def _txn(conn: sqlite3.Connection, refs: ValueRefs | None) -> Iterator[None]:
    """write_txn, telling `refs` whether what it stored committed."""
    try:
        with write_txn(conn):
            yield
    except BaseException:
        if refs is not None:
            refs.rollback()
        raise
    if refs is not None:
        refs.commit()


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


def _packed_row(
    conn: sqlite3.Connection, topic_id: int, part: int, offset: int, key: bytes | None,
    value: bytes, compress: bool, refs: ValueRefs | None,
) -> tuple[bytes, int, int | None]:
    """(bytes at rest, codec, ref) of a value: against the previous value of its key
    stored alone when that is smallest, else as `pack_value` stores it."""
    packed, codec = pack_value(value, compress)
    if refs is None or key is None:
        return packed, codec, None
    ref_key = (topic_id, part, bytes(key))
    referent = refs.candidate(conn, ref_key, offset)
    if referent is not None:
        framed = refs.compress(value, referent)
        if len(framed) < len(packed):
            return framed, VALUE_ZSTD_REF, referent.offset
    refs.stored_alone(ref_key, offset, value)
    return packed, codec, None


def append_rows(
    conn: sqlite3.Connection, topic_id: int, records: Sequence[tuple[int, bytes | None, bytes]],
    now: float, compress: bool = True, refs: ValueRefs | None = None,
) -> list[tuple[int, int]]:
    """Append (partition, key, value) records inside the caller's write transaction."""
    heads = end_offsets(conn, topic_id)
    rows = []
    positions = []
    for part, key, value in records:
        offset = heads.get(part, 0)
        heads[part] = offset + 1
        rows.append((topic_id, part, offset, key,
                     *_packed_row(conn, topic_id, part, offset, key, value, compress, refs),
                     now))
        positions.append((part, offset))
    conn.executemany(
        "INSERT INTO messages (topic_id, part, msg_offset, key, value, codec, ref, ts) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
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
    conn: sqlite3.Connection, batches: Sequence[PartitionedBatch], compress: bool = True,
    refs: ValueRefs | None = None,
) -> list[list[tuple[int, int]]]:
    now = time.time()
    with _txn(conn, refs):
        return [append_rows(conn, topic_id, records, now, compress, refs)
                for topic_id, records in batches]


def read(
    conn: sqlite3.Connection, topic_id: int, positions: Sequence[tuple[int, int]], limit: int
) -> list[tuple[int, int, bytes | None, bytes, float]]:
    """Up to `limit` records, filling from the partitions in the order given, their
    values as appended. A value stored against another row (codec 2) is expanded with
    that row's value: the one this read already decoded when it is in the same batch
    (the usual case: a post's annotations are appended together), else read again."""
    out: list[tuple[int, int, bytes | None, bytes, float]] = []
    # One read transaction, so every partition is read from the same snapshot.
    conn.execute("BEGIN")
    try:
        for part, offset in positions:
            remaining = limit - len(out)
            if remaining <= 0:
                break
            alone: dict[int, bytes] = {}  # offset -> value, of rows stored on their own
            for p, o, key, value, ts, codec, ref in conn.execute(
                    "SELECT part, msg_offset, key, value, ts, codec, ref FROM messages "
                    "WHERE topic_id = ? AND part = ? AND msg_offset >= ? "
                    "ORDER BY msg_offset LIMIT ?",
                    (topic_id, part, offset, remaining)):
                if ref is None:
                    if codec != VALUE_RAW:
                        value = unpack_value(value, codec)
                    alone[o] = value
                else:
                    referent = alone[ref] if ref in alone else _referent(conn, topic_id, p, ref)
                    value = unpack_value(value, codec, referent)
                out.append((p, o, key, value, ts))
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
    appends: Sequence[PartitionedBatch], compress: bool = True,
    refs: ValueRefs | None = None,
) -> None:
    """Append records (dead letters, replays) and store offsets in one transaction."""
    now = time.time()
    with _txn(conn, refs):
        for append_topic, records in appends:
            append_rows(conn, append_topic, records, now, compress, refs)
        conn.executemany(
            "INSERT INTO group_offsets (grp, topic_id, part, next_offset, updated_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (grp, topic_id, part) DO UPDATE SET "
            "next_offset = max(next_offset, excluded.next_offset), "
            "updated_at = excluded.updated_at",
            [(group, topic_id, part, offset, now) for part, offset in offsets.items()],
        )
