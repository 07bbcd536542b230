"""The default annotation store: one SQLite file, one row per (post, producer, version).

A row holds the key columns, the timestamps, the post's content fingerprint and the
annotation itself as msgspec JSON; re-writing a key (a post re-processed after a crash
or a retry) replaces the verdict and `updated_at` but keeps the first `created_at`.

A *different* post under an id the store already holds (another fingerprint) is refused
with PostIdReusedError and not written, so it cannot silently replace the first post's
annotations; the dispatcher dead-letters it at once. The check runs inside the write
transaction (under SQLite's write lock), so two different posts with one id racing in
two engines cannot both win. Rows written before fingerprints (the `fingerprint`
column is added on open: the migration) have "" and accept the next fingerprint.

Bodies are msgpack with the embedding taken out, compressed with zstd against a packaged
dictionary (stores/bodies.py: ~3.1 -> ~0.66 KB per post of six flows); the embedding
lives in `vectors` as int8 with a scale (float16 in rows of earlier versions), named by
a digest, so a vector two plans share is stored once (stores/vectors.py), and a 384-d
annotation costs ~0.5 KB instead of ~8 KB.
Rows written by earlier versions, as JSON (their body starts with "{") or as plain
msgpack, still read back unchanged: no rewrite is needed.

A post's fingerprint is stored once, in `fingerprints` (post id -> fingerprint), not on
each of its rows (six or more a post): a row whose fingerprint is the post's holds an
empty BLOB in its `fingerprint` column (no bytes; the empty text '' still means
"unknown"), and reads take the post's. A fingerprint of 32 hex digits (every one grebe
makes: `flows.sinks.post_fingerprint`) is kept as its 16 bytes and read back as hex; any
other as the text it is. Together ~170 bytes a post of six flows. Rows of earlier
versions hold the hex text in their own column and read and compare the same; a post
known only from them gets its `fingerprints` row with its next write.

Producer names are stored as 1-byte codes through a table of names
(stores/producers.py: ~90 bytes a post of six flows); rows of earlier versions hold the
name and read the same.

`created_at` is 0 when it equals `updated_at` (a first write: ~80% of rows), which SQLite
keeps in no bytes at all instead of 8 (~40 bytes a post of six flows); it reads back as
`updated_at`, and a rewrite of such a row keeps the first write's time as `created_at`.

Concurrent `upsert` calls from many tasks share one transaction (group commit) in the
store's own thread, and return only once their rows are committed, so a sink that
awaited `upsert` may let its post be acked.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec

from grebe.errors import StoreError, StoreUnavailableError
from grebe.sqlitedb import GroupWriter, SqliteDB, connect, write_txn
from grebe.stores import bodies
from grebe.stores.base import reused_id_error
from grebe.stores.producers import SCHEMA as PRODUCERS_SCHEMA
from grebe.stores.producers import ProducerCodes
from grebe.stores.vectors import PackedVector, pack, unpack
from grebe.types import Annotation

_SCHEMA = """
CREATE TABLE IF NOT EXISTS annotations (
    post_id TEXT NOT NULL,
    producer TEXT NOT NULL,
    version TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    body BLOB NOT NULL,
    fingerprint TEXT NOT NULL DEFAULT '',
    vector BLOB,
    PRIMARY KEY (post_id, producer, version)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fingerprints (
    post_id TEXT PRIMARY KEY,
    fingerprint BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS vectors (
    digest BLOB NOT NULL UNIQUE,
    dims INTEGER NOT NULL,
    dtype TEXT NOT NULL,
    data BLOB NOT NULL
);
"""
# `vectors` is a rowid table: rows land in insertion order, so its pages fill (keyed by
# the random digest, as stores before had it, WITHOUT ROWID, they were ~75% full: ~170
# bytes a post of six flows); only the small digest index takes random inserts. A store
# created before keeps its table; the same SQL runs on either.
# Migration of a store written before fingerprints: the column, empty for old rows.
_ADD_FINGERPRINT = "ALTER TABLE annotations ADD COLUMN fingerprint TEXT NOT NULL DEFAULT ''"
# ...and of a store written before binary vectors: rows keep their JSON body, no vector.
_ADD_VECTOR = "ALTER TABLE annotations ADD COLUMN vector BLOB"
_INSERT_VECTOR = "INSERT OR IGNORE INTO vectors (digest, dims, dtype, data) VALUES (?, ?, ?, ?)"

_UPSERT = (
    "INSERT INTO annotations "
    "(post_id, producer, version, created_at, updated_at, body, fingerprint, vector) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (post_id, producer, version) DO UPDATE SET "
    "created_at = CASE WHEN annotations.created_at = 0 THEN annotations.updated_at "
    "ELSE annotations.created_at END, "
    "updated_at = excluded.updated_at, body = excluded.body, "
    "fingerprint = excluded.fingerprint, vector = excluded.vector"
)
_SELECT_ROWS = (
    "SELECT a.post_id, a.producer, a.version, a.created_at, a.updated_at, "
    "CASE WHEN a.fingerprint = X'' THEN f.fingerprint ELSE a.fingerprint END, "
    "a.body, {vector} FROM annotations a {vector_joins} "
    "LEFT JOIN {fingerprints} f ON a.fingerprint = X'' AND f.post_id = a.post_id"
)
# A row names its vector by the `vectors` rowid (an integer: 2-3 bytes) in a store whose
# `vectors` is a rowid table, by its 16-byte digest in rows of earlier versions and in a
# store whose `vectors` is keyed by digest (WITHOUT ROWID, before round two): a BLOB
# never equals an integer, so one join finds either.
_BY_ROWID_OR_DIGEST = (
    "coalesce(v.dims, w.dims), coalesce(v.dtype, w.dtype), coalesce(v.data, w.data)",
    "LEFT JOIN vectors v ON v.rowid = a.vector LEFT JOIN vectors w ON w.digest = a.vector")
_BY_DIGEST = ("w.dims, w.dtype, w.data", "LEFT JOIN vectors w ON w.digest = a.vector")
_VECTOR_ROWID = "SELECT rowid FROM vectors WHERE digest = ?"


@dataclass(slots=True)
class _Layout:
    """What this store file holds, read once at open: the SELECT of its rows, whether
    rows name vectors by rowid, and its producer codes."""

    select: str
    vector_rowids: bool
    codes: ProducerCodes


def _layout(conn: sqlite3.Connection) -> _Layout:
    tables = dict(conn.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'table'"))
    vector_rowids = "WITHOUT ROWID" not in (tables.get("vectors") or "WITHOUT ROWID")
    vector, joins = _BY_ROWID_OR_DIGEST if vector_rowids else _BY_DIGEST
    # A file no version since per-post fingerprints has opened (read by `iter_all`): none.
    fingerprints = ("fingerprints" if "fingerprints" in tables
                    else "(SELECT NULL AS post_id, NULL AS fingerprint)")
    select = _SELECT_ROWS.format(vector=vector, vector_joins=joins, fingerprints=fingerprints)
    return _Layout(select, vector_rowids, ProducerCodes())

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Annotation)
_json_decoder = msgspec.json.Decoder(Annotation)  # bodies written before binary vectors


# PRAGMA user_version of a store created with producer codes: none of its rows holds a
# plain name, so a write need not look for one to move to its code (~2 µs a row).
_CODES_ONLY = 1


def _init(conn: sqlite3.Connection) -> None:
    created = conn.execute(
        "SELECT 1 FROM sqlite_schema WHERE name = 'annotations'").fetchone() is None
    conn.executescript(_SCHEMA + PRODUCERS_SCHEMA)
    if created:
        conn.execute(f"PRAGMA user_version = {_CODES_ONLY}")
    columns = {row[1] for row in conn.execute("PRAGMA table_info(annotations)")}
    for column, migration in (("fingerprint", _ADD_FINGERPRINT), ("vector", _ADD_VECTOR)):
        if column not in columns:
            with write_txn(conn):
                conn.execute(migration)


Row = tuple[str, str, str, float, float, bytes, str, PackedVector | None]


_POST_FINGERPRINT = "SELECT fingerprint FROM fingerprints WHERE post_id = ?"
_INSERT_FINGERPRINT = "INSERT INTO fingerprints (post_id, fingerprint) VALUES (?, ?)"
# ...of a post known only from rows of earlier versions (their own column)
_FINGERPRINT = (
    "SELECT fingerprint FROM annotations WHERE post_id = ? AND fingerprint != '' "
    "AND fingerprint != X''")
_THE_POSTS = b""  # a row's `fingerprint` column: the post's, in `fingerprints`
_HEX_FINGERPRINT_CHARS = 32


def _fingerprint_at_rest(fingerprint: str) -> str | bytes:
    """The column value of a fingerprint: 16 bytes for 32 lowercase hex digits (so it
    reads back as the same text), the text itself otherwise."""
    if len(fingerprint) == _HEX_FINGERPRINT_CHARS:
        try:
            packed = bytes.fromhex(fingerprint)
        except ValueError:
            return fingerprint
        if packed.hex() == fingerprint:
            return packed
    return fingerprint


def _fingerprint_read(value: str | bytes) -> str:
    return value.hex() if isinstance(value, bytes) else value


def _upsert(conn: sqlite3.Connection, rows: list[Row], layout: _Layout) -> dict[int, str]:
    """Write the rows, except those of a post id held under another fingerprint:
    {row index: the stored fingerprint} of the refused ones."""
    codes = layout.codes
    try:
        refused = _write(conn, rows, layout)
    except BaseException:
        codes.rollback()
        raise
    codes.commit()
    return refused


def _write(conn: sqlite3.Connection, rows: list[Row], layout: _Layout) -> dict[int, str]:
    codes = layout.codes
    refused: dict[int, str] = {}
    # A post's plans land in one batch together: look its fingerprint up once, then
    # remember what this transaction made it (the first one held, or the one written).
    held: dict[str, str | None] = {}
    in_table: set[str] = set()  # posts whose fingerprint `fingerprints` holds
    with write_txn(conn):
        for i, row in enumerate(rows):
            fingerprint: str | bytes = row[6]
            if row[6]:
                if row[0] not in held:
                    found = conn.execute(_POST_FINGERPRINT, (row[0],)).fetchone()
                    if found is not None:
                        in_table.add(row[0])
                    else:
                        found = conn.execute(_FINGERPRINT, (row[0],)).fetchone()
                    held[row[0]] = None if found is None else _fingerprint_read(found[0])
                stored = held[row[0]]
                if stored is not None and stored != row[6]:
                    refused[i] = stored
                    continue
                held[row[0]] = row[6]
                if row[0] not in in_table:
                    conn.execute(_INSERT_FINGERPRINT, (row[0], _fingerprint_at_rest(row[6])))
                    in_table.add(row[0])
                fingerprint = _THE_POSTS
            vector, vector_ref = row[7], None
            if vector is not None:
                conn.execute(_INSERT_VECTOR, (vector.digest, vector.dims, vector.dtype,
                                              vector.data))
                vector_ref = (conn.execute(_VECTOR_ROWID, (vector.digest,)).fetchone()[0]
                              if layout.vector_rowids else vector.digest)
            code = codes.code(conn, row[1])
            if codes.names_at_rest:
                codes.adopt(conn, row[0], row[1], row[2], code)
            conn.execute(_UPSERT, (row[0], code, *row[2:6], fingerprint, vector_ref))
    return refused


def _encode_and_upsert(conn: sqlite3.Connection, annotations: list[Annotation],
                       layout: _Layout) -> dict[int, str]:
    return _upsert(conn, [_row(a) for a in annotations], layout)


def _encode(annotation: Annotation) -> tuple[bytes, PackedVector | None]:
    """The row body (msgpack, zstd against the packaged dictionary) and the embedding to
    store apart. The body leaves out what the row's columns hold (the key, the
    fingerprint's 32 hex digits, two timestamps: ~150 bytes a post of six flows
    compressed, and the post id again: ~35 bytes more, at real 19-digit ids ~80);
    `_decode` puts them back from the columns."""
    body = _encoder.encode(msgspec.structs.replace(
        annotation, post_id="", producer="", version="", embedding=None,
        content_fingerprint="", created_at=0.0, updated_at=0.0))
    vector = None if annotation.embedding is None else pack(annotation.embedding)
    return bodies.compress(body), vector


def _row(a: Annotation) -> Row:
    body, vector = _encode(a)
    created_at = 0.0 if a.created_at == a.updated_at else a.created_at  # see the docstring
    return (a.post_id, a.producer, a.version, created_at, a.updated_at, body,
            a.content_fingerprint, vector)


def _decode(
    post_id: str, producer: str, version: str,
    created_at: float, updated_at: float, fingerprint: str | bytes, body: bytes,
    dims: int | None = None, dtype: str | None = None, data: bytes | None = None,
) -> Annotation:
    if body[:1] == b"{":  # written as JSON by an earlier version, embedding inline
        annotation = _json_decoder.decode(body)
    else:  # msgpack: compressed, or as written before compressed bodies
        annotation = _decoder.decode(bodies.decompress(body) if bodies.is_compressed(body)
                                     else body)
        if data is not None and dims is not None and dtype is not None:
            annotation.embedding = unpack(dims, dtype, data)
    # The columns hold these for every row (bodies of earlier versions hold them too).
    annotation.post_id, annotation.producer, annotation.version = post_id, producer, version
    annotation.created_at = created_at or updated_at  # 0: the same as updated_at
    annotation.updated_at = updated_at
    annotation.content_fingerprint = (annotation.content_fingerprint
                                      or _fingerprint_read(fingerprint))
    return annotation


def _get(conn: sqlite3.Connection, post_id: str, layout: _Layout) -> list[Annotation]:
    rows = conn.execute(f"{layout.select} WHERE a.post_id = ?", (post_id,)).fetchall()
    return _decoded(conn, rows, layout.codes)


def _decoded(conn: sqlite3.Connection, rows: list[tuple], codes: ProducerCodes,
             ) -> list[Annotation]:
    """Rows of one post, decoded, in (producer name, version) order (codes do not sort
    as their names)."""
    out = [_decode(row[0], codes.name(conn, row[1]), *row[2:]) for row in rows]
    out.sort(key=lambda a: (a.producer, a.version))
    return out


def _count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM annotations").fetchone()[0])


class SqliteStore:
    """AnnotationStore on SQLite (WAL): safe to share between engine processes."""

    def __init__(
        self, path: Path, *, synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    ) -> None:
        self.path = Path(path)
        self._db = SqliteDB(self.path, synchronous=synchronous, name="grebe-store")
        self._writer: GroupWriter[Annotation] = GroupWriter(self._flush)
        self._layout = _Layout("", True, ProducerCodes())  # read at open

    async def start(self) -> None:
        def init(conn: sqlite3.Connection) -> None:
            _init(conn)
            self._layout = _layout(conn)
            self._layout.codes.names_at_rest = (
                conn.execute("PRAGMA user_version").fetchone()[0] != _CODES_ONLY)

        try:
            await self._db.open(init)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open annotation store {self.path}: {exc}") from exc

    async def stop(self) -> None:
        await self._writer.close()
        await self._db.close()

    async def upsert(self, annotations: Sequence[Annotation]) -> None:
        """Insert or replace by key; PostIdReusedError for a different post under an id
        this store holds (see the module docstring)."""
        await self._writer.submit(annotations)

    async def get(self, post_id: str) -> list[Annotation]:
        try:
            return await self._db.run(_get, post_id, self._layout)
        except (sqlite3.Error, ValueError) as exc:  # msgspec.DecodeError, a bad frame
            raise StoreError(f"annotation store {self.path}: {exc}") from exc

    async def count(self) -> int:
        return await self._db.run(_count)

    async def _flush(self, annotations: list[Annotation]) -> dict[int, Exception]:
        # The last write of a key in one batch wins, as it would one by one. The rows are
        # encoded in the store's thread, not on the engine's event loop: the loop is the
        # engine's busiest thread, and zstd lets go of the GIL while it compresses.
        try:
            refused = await self._db.run(_encode_and_upsert, annotations, self._layout)
        except sqlite3.OperationalError as exc:  # disk full, locked, I/O: not the post's
            raise StoreUnavailableError(f"annotation store {self.path}: {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreError(f"annotation store {self.path}: {exc}") from exc
        return {
            i: reused_id_error(annotations[i], stored) for i, stored in refused.items()
        }


def iter_all(path: Path, batch: int = 1000) -> Iterator[Annotation]:
    """Every annotation in key order, read synchronously (CLI and test helper)."""
    conn = connect(Path(path))
    try:
        layout = _layout(conn)
        codes = layout.codes
        cursor = conn.execute(f"{layout.select} ORDER BY a.post_id")
        post: list[tuple] = []  # one post's rows, sorted by name as they are decoded
        while rows := cursor.fetchmany(batch):
            for row in rows:
                if post and post[0][0] != row[0]:
                    yield from _decoded(conn, post, codes)
                    post = []
                post.append(row)
        yield from _decoded(conn, post, codes)
    finally:
        conn.close()
