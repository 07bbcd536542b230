"""PostgresStore against the real server of scripts/services.sh."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from grebe.errors import StoreError
from grebe.stores.base import AnnotationStore
from grebe.stores.postgres import PostgresStore
from grebe.types import Annotation

pytestmark = pytest.mark.integration


@pytest.fixture
async def store(postgres_dsn: str) -> AsyncIterator[PostgresStore]:
    table = f"ann_{uuid.uuid4().hex[:10]}"
    store = PostgresStore(postgres_dsn, table=table)
    await store.start()
    yield store
    await store.stop()
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await conn.execute(f"DROP TABLE IF EXISTS {table}")
    finally:
        await conn.close()


def _annotation(post: str, producer: str = "spam", version: str = "1", **kw: object) -> Annotation:
    return Annotation(post_id=post, producer=producer, version=version, **kw)  # type: ignore[arg-type]


async def test_upsert_is_idempotent_and_keeps_created_at(store: PostgresStore) -> None:
    assert isinstance(store, AnnotationStore)
    first = _annotation("p1", labels=["spam"], scores={"spam": 0.9}, reasons={"spam": "link"},
                        embedding=[0.5, -1.25], model_versions={"clf": "v3"},
                        created_at=1000.0, updated_at=1000.0)
    await store.upsert([first, _annotation("p1", producer="safety", created_at=1000.0)])
    rewrite = _annotation("p1", labels=[], scores={"spam": 0.1}, created_at=2000.0,
                          updated_at=2000.0, transcript="hello")
    await store.upsert([rewrite])
    await store.upsert([rewrite])  # again: still one row
    rows = await store.get("p1")
    assert [(a.producer, a.version) for a in rows] == [("safety", "1"), ("spam", "1")]
    spam = rows[1]
    assert spam.created_at == 1000.0 and spam.updated_at == 2000.0
    assert (spam.labels, spam.scores, spam.transcript) == ([], {"spam": 0.1}, "hello")
    assert spam.embedding is None  # replaced by the rewrite
    assert await store.count() == 2
    assert await store.get("nope") == []


async def test_round_trips_every_field(store: PostgresStore) -> None:
    original = _annotation("p2", labels=["a", "b"], scores={"x": 0.25}, reasons={"a": "ü ✓"},
                           embedding=[0.5, 0.25, -2.0], transcript="t", model_versions={"m": "1"},
                           created_at=1234.5, updated_at=1234.5)
    await store.upsert([original])
    [stored] = await store.get("p2")
    assert stored == original


async def test_concurrent_upserts_are_grouped_and_duplicates_in_a_batch_are_fine(
    store: PostgresStore,
) -> None:
    batch = [_annotation(f"p{i % 50}", scores={"i": float(i)}) for i in range(200)]
    await asyncio.gather(*(store.upsert([a]) for a in batch))
    assert await store.count() == 50
    [last] = await store.get("p49")
    assert last.scores == {"i": 199.0}  # the last write of a key wins


async def test_bad_dsn_and_bad_table_are_clear_errors(postgres_dsn: str) -> None:
    with pytest.raises(StoreError, match="lower-case identifier"):
        PostgresStore(postgres_dsn, table="x; DROP TABLE y")
    bad = PostgresStore("postgresql://grebe:wrong@127.0.0.1:5432/grebe")
    with pytest.raises(StoreError, match="cannot open") as info:
        await bad.start()
    assert "wrong" not in str(info.value)  # no password in the message


async def test_table_from_before_policy_versions_is_migrated(postgres_dsn: str) -> None:
    table = f"ann_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(postgres_dsn)
    try:
        # The schema and a row exactly as grebe wrote them before policy_version.
        await conn.execute(f"""CREATE TABLE {table} (
            post_id text NOT NULL, producer text NOT NULL, version text NOT NULL,
            labels jsonb NOT NULL, scores jsonb NOT NULL, reasons jsonb NOT NULL,
            embedding real[], transcript text, model_versions jsonb NOT NULL,
            created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL,
            PRIMARY KEY (post_id, producer, version))""")
        await conn.execute(
            f"INSERT INTO {table} VALUES ('old', 'spam_comment', '1', '[\"spam\"]', "
            "'{\"spam\": 0.9}', '{}', NULL, NULL, '{}', now(), now())")
        store = PostgresStore(postgres_dsn, table=table)
        await store.start()
        try:
            (old,) = await store.get("old")
            assert old.labels == ["spam"] and old.policy_version is None
            await store.upsert([_annotation("new", policy_version="2026.11.23-1")])
            (new,) = await store.get("new")
            assert new.policy_version == "2026.11.23-1"
        finally:
            await store.stop()
    finally:
        await conn.execute(f"DROP TABLE IF EXISTS {table}")
        await conn.close()
