"""PostgreSQL annotation store (asyncpg): one row per (post, producer, version).

Labels, scores, reasons and model versions are jsonb (queryable: `scores->>'spam'`),
the embedding a real[]. Writing a key again (a post re-processed after a crash or a
retry) replaces the verdict and `updated_at` and keeps the first `created_at`.

Many tasks upsert one annotation each; concurrent calls are grouped (GroupWriter) into
one pipelined `executemany` in one transaction, so the cost per post is a fraction of a
round trip. A pooled connection is held only for that statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
import msgspec

from grebe import constants as C
from grebe.errors import StoreError, StoreUnavailableError
from grebe.sqlitedb import GroupWriter
from grebe.stores.base import reused_id_error
from grebe.types import Annotation

_COLUMNS = (
    "post_id, producer, version, labels, scores, reasons, embedding, transcript, "
    "model_versions, created_at, updated_at, fingerprint"
)
_POOL_MIN, _POOL_MAX = 1, 4
_DB_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)
# The server, not the rows, is at fault: down, restarting, out of disk or read-only.
_UNAVAILABLE = (
    asyncpg.PostgresConnectionError, asyncpg.InterfaceError, asyncpg.CannotConnectNowError,
    asyncpg.InsufficientResourcesError, asyncpg.OperatorInterventionError,
    asyncpg.ReadOnlySQLTransactionError, OSError,
)


def _schema(table: str) -> str:
    return f"""
CREATE TABLE IF NOT EXISTS {table} (
    post_id text NOT NULL,
    producer text NOT NULL,
    version text NOT NULL,
    labels jsonb NOT NULL,
    scores jsonb NOT NULL,
    reasons jsonb NOT NULL,
    embedding real[],
    transcript text,
    model_versions jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    fingerprint text NOT NULL DEFAULT '',
    PRIMARY KEY (post_id, producer, version)
);
-- Migration of a table written before fingerprints: old rows get ''.
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS fingerprint text NOT NULL DEFAULT ''"""


def _upsert_sql(table: str) -> str:
    return (
        f"INSERT INTO {table} ({_COLUMNS}) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) "
        "ON CONFLICT (post_id, producer, version) DO UPDATE SET "
        "labels = excluded.labels, scores = excluded.scores, reasons = excluded.reasons, "
        "embedding = excluded.embedding, transcript = excluded.transcript, "
        "model_versions = excluded.model_versions, updated_at = excluded.updated_at, "
        "fingerprint = excluded.fingerprint"
    )


def _fingerprints_sql(table: str) -> str:
    return (
        f"SELECT DISTINCT ON (post_id) post_id, fingerprint FROM {table} "
        "WHERE post_id = ANY($1::text[]) AND fingerprint <> ''"
    )


def _ts(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def _row(a: Annotation) -> tuple[Any, ...]:
    return (
        a.post_id, a.producer, a.version, a.labels, a.scores, a.reasons, a.embedding,
        a.transcript, a.model_versions, _ts(a.created_at), _ts(a.updated_at),
        a.content_fingerprint,
    )


def _annotation(record: asyncpg.Record) -> Annotation:
    return Annotation(
        post_id=record["post_id"], producer=record["producer"], version=record["version"],
        labels=record["labels"], scores=record["scores"], reasons=record["reasons"],
        embedding=list(record["embedding"]) if record["embedding"] is not None else None,
        transcript=record["transcript"], model_versions=record["model_versions"],
        created_at=record["created_at"].timestamp(), updated_at=record["updated_at"].timestamp(),
        content_fingerprint=record["fingerprint"],
    )


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec(
        "jsonb", schema="pg_catalog", format="text",
        encoder=lambda value: msgspec.json.encode(value).decode(),
        decoder=msgspec.json.decode,
    )


class PostgresStore:
    """AnnotationStore on PostgreSQL; the table is created on start if missing."""

    def __init__(self, dsn: str, *, table: str = C.DEFAULT_POSTGRES_TABLE,
                 pool_max: int = _POOL_MAX) -> None:
        if not table.isidentifier() or not table.islower():
            raise StoreError(f"postgres table name {table!r} must be a lower-case identifier")
        self.dsn = dsn
        self.table = table
        self._pool_max = pool_max
        self._pool: asyncpg.Pool | None = None
        self._upsert = _upsert_sql(table)
        self._fingerprints = _fingerprints_sql(table)
        self._writer: GroupWriter[Annotation] = GroupWriter(self._flush)

    async def start(self) -> None:
        try:
            self._pool = await asyncpg.create_pool(
                self.dsn, min_size=_POOL_MIN, max_size=self._pool_max, init=_init_connection
            )
            async with self._pool.acquire() as conn, conn.transaction():
                # Replicas starting together would race in CREATE TABLE IF NOT EXISTS.
                await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", self.table)
                await conn.execute(_schema(self.table))
        except (*_DB_ERRORS, ValueError) as exc:
            await self._close_pool()
            raise StoreError(f"cannot open PostgreSQL store ({_safe(self.dsn)}): {exc}") from exc

    async def stop(self) -> None:
        await self._writer.close()
        await self._close_pool()

    async def _close_pool(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    async def upsert(self, annotations: Sequence[Annotation]) -> None:
        await self._writer.submit(annotations)

    async def get(self, post_id: str) -> list[Annotation]:
        try:
            async with self._started().acquire() as conn:
                records = await conn.fetch(
                    f"SELECT {_COLUMNS} FROM {self.table} WHERE post_id = $1 "
                    "ORDER BY producer, version", post_id,
                )
        except _DB_ERRORS as exc:
            raise StoreError(f"PostgreSQL store: {exc}") from exc
        return [_annotation(r) for r in records]

    async def count(self) -> int:
        async with self._started().acquire() as conn:
            return int(await conn.fetchval(f"SELECT count(*) FROM {self.table}"))

    async def _flush(self, annotations: list[Annotation]) -> dict[int, Exception]:
        """Upsert, except a different post under a held id (PostIdReusedError for its
        caller). Each id is locked for the transaction (advisory, in sorted order, so
        replicas cannot deadlock), so two posts racing under one id cannot both win."""
        refused: dict[int, Exception] = {}
        try:
            async with self._started().acquire() as conn, conn.transaction():
                ids = sorted({a.post_id for a in annotations if a.content_fingerprint})
                if ids:  # one round trip; unnest keeps the sorted order
                    await conn.execute(
                        "SELECT pg_advisory_xact_lock(hashtext($1 || ':' || x)) "
                        "FROM unnest($2::text[]) AS x", self.table, ids,
                    )
                held = dict(await conn.fetch(self._fingerprints, ids)) if ids else {}
                rows = []
                for i, a in enumerate(annotations):
                    known = held.get(a.post_id)
                    if known and a.content_fingerprint and known != a.content_fingerprint:
                        refused[i] = reused_id_error(a, known)
                        continue
                    if a.content_fingerprint:
                        held.setdefault(a.post_id, a.content_fingerprint)
                    rows.append(_row(a))
                if rows:
                    await conn.executemany(self._upsert, rows)
        except _DB_ERRORS as exc:
            error = StoreUnavailableError if isinstance(exc, _UNAVAILABLE) else StoreError
            raise error(
                f"PostgreSQL store: upsert of {len(annotations)} rows failed: {exc}"
            ) from exc
        return refused

    def _started(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreError("PostgresStore used before start()")
        return self._pool


def _safe(dsn: str) -> str:
    """The DSN without its password, for error messages."""
    scheme, sep, rest = dsn.partition("://")
    if "@" in rest:
        creds, host = rest.split("@", 1)
        rest = f"{creds.split(':', 1)[0]}@{host}"
    return f"{scheme}{sep}{rest}"
