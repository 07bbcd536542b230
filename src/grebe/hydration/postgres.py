"""The post table on PostgreSQL (asyncpg), for many machines: `<prefix>_posts` and
`<prefix>_users`, bodies as msgspec JSON text (a new optional field needs no migration).

Writes are grouped (GroupWriter): the posts that finish together go in one statement.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg
import msgspec

from grebe.errors import HydrationUnavailableError
from grebe.sqlitedb import GroupWriter
from grebe.types import Post, User

_POOL_MIN, _POOL_MAX = 1, 4
_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)

_post_decoder = msgspec.json.Decoder(Post)
_user_decoder = msgspec.json.Decoder(User)
_encoder = msgspec.json.Encoder()

Rows = tuple[list[tuple[str, str, float, str]], list[tuple[str, str]]]


def _schema(prefix: str) -> str:
    return f"""
CREATE TABLE IF NOT EXISTS {prefix}_posts (
    id text PRIMARY KEY, author_id text NOT NULL, created_at double precision NOT NULL,
    body text NOT NULL
);
CREATE INDEX IF NOT EXISTS {prefix}_posts_by_author ON {prefix}_posts (author_id, created_at);
CREATE TABLE IF NOT EXISTS {prefix}_users (id text PRIMARY KEY, body text NOT NULL);
"""


class PostgresPostTable:
    """PostTable on PostgreSQL; `prefix` is validated by the config (an identifier)."""

    def __init__(self, dsn: str, prefix: str) -> None:
        self.dsn = dsn
        self.prefix = prefix
        self._pool: asyncpg.Pool | None = None
        self._writer: GroupWriter[Rows] = GroupWriter(self._flush)

    async def start(self) -> None:
        try:
            self._pool = await asyncpg.create_pool(self.dsn, min_size=_POOL_MIN,
                                                   max_size=_POOL_MAX)
            async with self._pool.acquire() as conn:
                await conn.execute(_schema(self.prefix))
        except _ERRORS as exc:
            raise HydrationUnavailableError(f"post table on PostgreSQL: {exc}") from exc

    async def stop(self) -> None:
        await self._writer.close()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    def _require_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise HydrationUnavailableError("post table on PostgreSQL is not started")
        return self._pool

    async def record(self, posts: Sequence[Post], users: Sequence[User]) -> None:
        rows: Rows = (
            [(p.id, p.author_id, p.created_at, _encoder.encode(p).decode()) for p in posts],
            [(u.id, _encoder.encode(u).decode()) for u in users],
        )
        try:
            await self._writer.submit([rows])
        except _ERRORS as exc:
            raise HydrationUnavailableError(f"post table on PostgreSQL: {exc}") from exc

    async def _flush(self, batches: list[Rows]) -> None:
        # One row per id in one statement: ON CONFLICT cannot touch a row twice.
        posts = {row[0]: row for batch in batches for row in batch[0]}
        users = {row[0]: row for batch in batches for row in batch[1]}
        async with self._require_pool().acquire() as conn, conn.transaction():
            if posts:
                await conn.executemany(
                    f"INSERT INTO {self.prefix}_posts (id, author_id, created_at, body) "
                    "VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO UPDATE SET "
                    "author_id = excluded.author_id, created_at = excluded.created_at, "
                    "body = excluded.body", list(posts.values()))
            if users:
                await conn.executemany(
                    f"INSERT INTO {self.prefix}_users (id, body) VALUES ($1, $2) "
                    "ON CONFLICT (id) DO UPDATE SET body = excluded.body", list(users.values()))

    async def get_posts(self, ids: Sequence[str]) -> dict[str, Post]:
        rows = await self._fetch(
            f"SELECT body FROM {self.prefix}_posts WHERE id = ANY($1::text[])", list(ids))
        return {post.id: post for post in (_post_decoder.decode(r) for r in rows)}

    async def get_users(self, ids: Sequence[str]) -> dict[str, User]:
        rows = await self._fetch(
            f"SELECT body FROM {self.prefix}_users WHERE id = ANY($1::text[])", list(ids))
        return {user.id: user for user in (_user_decoder.decode(r) for r in rows)}

    async def recent_posts(self, author_id: str, n: int) -> list[Post]:
        rows = await self._fetch(
            f"SELECT body FROM {self.prefix}_posts WHERE author_id = $1 "
            "ORDER BY created_at DESC LIMIT $2", author_id, n)
        return [_post_decoder.decode(r) for r in rows]

    async def _fetch(self, sql: str, *args: object) -> list[str]:
        try:
            records = await self._require_pool().fetch(sql, *args)
        except _ERRORS as exc:
            raise HydrationUnavailableError(f"post table on PostgreSQL: {exc}") from exc
        return [record["body"] for record in records]
