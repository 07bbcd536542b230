"""The embedded post table: SQLite beside the annotation store (`<data_dir>/posts.db`).

Every engine process opens it; WAL lets them read while one writes, and writes go
through a GroupWriter so many concurrent posts cost one transaction. Rows hold the
post (or user) as msgspec JSON, so a field added to types.py needs no migration,
compressed with zstd against a packaged dictionary trained on such rows (a tweet's
~460 bytes of JSON, most of them field names and defaults, take ~100). Rows written
before compression (plain JSON: a body starting with "{", never zstd's magic) still read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import msgspec

from grebe import constants as C
from grebe.errors import HydrationUnavailableError
from grebe.sqlitedb import GroupWriter, SqliteDB, write_txn
from grebe.types import Post, User
from grebe.zdict import ZSTD_MAGIC, DictCodec

_SCHEMA = """
CREATE TABLE IF NOT EXISTS posts (
    id TEXT PRIMARY KEY, author_id TEXT NOT NULL, created_at REAL NOT NULL, body BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS posts_by_author ON posts (author_id, created_at);
CREATE TABLE IF NOT EXISTS users (id TEXT PRIMARY KEY, body BLOB NOT NULL) WITHOUT ROWID;
"""
# WITHOUT ROWID (new files): a table keyed by its id holds its rows in the id's b-tree,
# not in a rowid table plus an index of the ids beside it (~25 bytes a post: the id
# twice, a rowid twice). A file created before keeps its tables; the same SQL runs on
# either.
_UPSERT_POST = (
    "INSERT INTO posts (id, author_id, created_at, body) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET author_id = excluded.author_id, "
    "created_at = excluded.created_at, body = excluded.body"
)
_UPSERT_USER = (
    "INSERT INTO users (id, body) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET body = excluded.body"
)
_ERRORS = (sqlite3.Error, OSError, RuntimeError)  # RuntimeError: used before start()

_post_decoder = msgspec.json.Decoder(Post)
_user_decoder = msgspec.json.Decoder(User)
_json = msgspec.json.Encoder().encode
_bodies = DictCodec(C.POST_DICT_PREFIX, C.POST_DICT_ID, C.POST_ZSTD_LEVEL)


def _encode(item: Post | User) -> bytes:
    return _bodies.compress(_json(item))


def _body(stored: bytes) -> bytes:
    """The JSON of a row: compressed by this version, plain by earlier ones."""
    return _bodies.decompress(stored) if stored[:4] == ZSTD_MAGIC else stored

Rows = tuple[list[tuple[str, str, float, bytes]], list[tuple[str, bytes]]]


def _create(conn: sqlite3.Connection) -> None:
    conn.executescript(_SCHEMA)


class SqlitePostTable:
    """PostTable on one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = SqliteDB(path, name="post-table")
        self._writer: GroupWriter[Rows] = GroupWriter(self._flush)

    async def start(self) -> None:
        try:
            await self._db.open(_create)
        except _ERRORS as exc:
            raise HydrationUnavailableError(f"post table {self.path}: {exc}") from exc

    async def stop(self) -> None:
        await self._writer.close()
        await self._db.close()

    async def record(self, posts: Sequence[Post], users: Sequence[User]) -> None:
        rows: Rows = (
            [(p.id, p.author_id, p.created_at, _encode(p)) for p in posts],
            [(u.id, _encode(u)) for u in users],
        )
        try:
            await self._writer.submit([rows])
        except _ERRORS as exc:
            raise HydrationUnavailableError(f"post table {self.path}: {exc}") from exc

    async def _flush(self, batches: list[Rows]) -> None:
        posts = [row for batch in batches for row in batch[0]]
        users = [row for batch in batches for row in batch[1]]

        def write(conn: sqlite3.Connection) -> None:
            with write_txn(conn):
                conn.executemany(_UPSERT_POST, posts)
                conn.executemany(_UPSERT_USER, users)

        await self._db.run(write)

    async def get_posts(self, ids: Sequence[str]) -> dict[str, Post]:
        rows = await self._select("SELECT body FROM posts WHERE id IN ({})", ids)
        return {post.id: post for post in (_post_decoder.decode(_body(r)) for r in rows)}

    async def get_users(self, ids: Sequence[str]) -> dict[str, User]:
        rows = await self._select("SELECT body FROM users WHERE id IN ({})", ids)
        return {user.id: user for user in (_user_decoder.decode(_body(r)) for r in rows)}

    async def recent_posts(self, author_id: str, n: int) -> list[Post]:
        def read(conn: sqlite3.Connection) -> list[bytes]:
            cursor = conn.execute(
                "SELECT body FROM posts WHERE author_id = ? ORDER BY created_at DESC LIMIT ?",
                (author_id, n),
            )
            return [row[0] for row in cursor]

        try:
            rows = await self._db.run(read)
        except _ERRORS as exc:
            raise HydrationUnavailableError(f"post table {self.path}: {exc}") from exc
        return [_post_decoder.decode(_body(r)) for r in rows]

    async def _select(self, sql: str, ids: Sequence[str]) -> list[bytes]:
        unique = list(dict.fromkeys(ids))

        def read(conn: sqlite3.Connection) -> list[bytes]:
            found: list[bytes] = []
            for i in range(0, len(unique), C.HYDRATION_SQL_CHUNK):
                chunk = unique[i : i + C.HYDRATION_SQL_CHUNK]
                query = sql.format(", ".join("?" * len(chunk)))
                found.extend(row[0] for row in conn.execute(query, chunk))
            return found

        if not unique:
            return []
        try:
            return await self._db.run(read)
        except _ERRORS as exc:
            raise HydrationUnavailableError(f"post table {self.path}: {exc}") from exc
