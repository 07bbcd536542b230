"""A second, different post under an existing post id used to replace the first post's
annotations silently. Now the store keeps the post's content fingerprint and refuses a
different post under a held id (PostIdReusedError); the dispatcher dead-letters it at
once with reason post_id_reused. A store written by the previous version (no fingerprint
column) is migrated on open and stays readable."""

import asyncio
import json
import sqlite3
import uuid

import asyncpg
import msgspec
import pytest
import redis.asyncio as aioredis

from grebe import constants as C
from grebe.brokers.factory import local_log
from grebe.brokers.local import LocalProducer
from grebe.codec import decode_dead_letter
from grebe.config import load_config
from grebe.errors import PostIdReusedError
from grebe.stores.base import MemoryStore
from grebe.stores.postgres import PostgresStore
from grebe.stores.redis import RedisStore
from grebe.stores.sqlite import SqliteStore
from grebe.types import Annotation, Post, post_fingerprint
from pipeline_run import run_until_caught_up

FIRST = Post(id="p1", author_id="alice", text="first post")
OTHER = Post(id="p1", author_id="bob", text="a different post, same id")
NEW = Post(id="p2", author_id="carol", text="arrives together with...")
NEW_OTHER = Post(id="p2", author_id="dave", text="...another post under its id")


def _annotation(post: Post, producer: str = "basic", **kw) -> Annotation:
    return Annotation(post_id=post.id, producer=producer, version="1",
                      content_fingerprint=post_fingerprint(post), **kw)


def test_fingerprint_ignores_counters_but_not_content() -> None:
    liked = msgspec.structs.replace(FIRST, like_count=99, view_count=1000)
    assert post_fingerprint(liked) == post_fingerprint(FIRST)
    assert post_fingerprint(OTHER) != post_fingerprint(FIRST)


@pytest.fixture
async def redis_prefix(request):
    """A fresh Redis key prefix (its keys deleted after), for the redis cases only."""
    if "redis" not in request.node.name:
        yield None
        return
    url = request.getfixturevalue("redis_url")
    prefix = f"reuse-{uuid.uuid4().hex[:10]}"
    yield url, prefix
    client = aioredis.Redis.from_url(url)
    try:
        keys = [k async for k in client.scan_iter(f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture
async def pg_table(request):
    """A fresh PostgreSQL table name (dropped after), for the postgres cases only."""
    if "postgres" not in request.node.name:
        yield None
        return
    dsn = request.getfixturevalue("postgres_dsn")
    table = f"reuse_{uuid.uuid4().hex[:10]}"
    yield dsn, table
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"DROP TABLE IF EXISTS {table}")
    finally:
        await conn.close()


def _store(kind: str, tmp_path, pg_table, redis_prefix):
    if kind == "sqlite":
        return SqliteStore(tmp_path / "a.db")
    if kind == "redis":
        url, prefix = redis_prefix
        return RedisStore(url, prefix=prefix)
    if kind == "postgres":
        dsn, table = pg_table
        return PostgresStore(dsn, table=table)
    return MemoryStore()


@pytest.mark.parametrize("kind", ["sqlite", "memory", "postgres", "redis"])
async def test_a_different_post_under_a_held_id_is_refused(
    tmp_path, kind, pg_table, redis_prefix
) -> None:
    store = _store(kind, tmp_path, pg_table, redis_prefix)
    await store.start()
    try:
        await store.upsert([_annotation(FIRST, labels=["first"])])
        # The same post again (a retry, a redelivery, another plan): fine.
        await store.upsert([_annotation(FIRST, labels=["again"])])
        await store.upsert([_annotation(FIRST, producer="spam")])
        with pytest.raises(PostIdReusedError, match="reused with different content"):
            await store.upsert([_annotation(OTHER, labels=["other"])])
        kept = {a.producer: a.labels for a in await store.get("p1")}
        assert kept == {"basic": ["again"], "spam": []}
        # Within one group write too: the first post of the id wins, the other is refused.
        both = await asyncio.gather(
            store.upsert([_annotation(NEW)]), store.upsert([_annotation(NEW_OTHER)]),
            return_exceptions=True,
        )
        assert [type(r).__name__ for r in both] == ["NoneType", "PostIdReusedError"]
    finally:
        await store.stop()


async def test_a_postgres_table_written_before_fingerprints_is_migrated(pg_table) -> None:
    dsn, table = pg_table
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"""CREATE TABLE {table} (
            post_id text NOT NULL, producer text NOT NULL, version text NOT NULL,
            labels jsonb NOT NULL, scores jsonb NOT NULL, reasons jsonb NOT NULL,
            embedding real[], transcript text, model_versions jsonb NOT NULL,
            created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL,
            PRIMARY KEY (post_id, producer, version))""")
        await conn.execute(
            f"INSERT INTO {table} VALUES ('p1', 'basic', '1', '[\"old\"]', '{{}}', '{{}}', "
            "NULL, NULL, '{}', now(), now())"
        )
    finally:
        await conn.close()
    store = PostgresStore(dsn, table=table)
    await store.start()
    try:
        (old,) = await store.get("p1")
        assert old.labels == ["old"] and old.content_fingerprint == ""
        await store.upsert([_annotation(FIRST, labels=["new"])])
        with pytest.raises(PostIdReusedError):
            await store.upsert([_annotation(OTHER)])
    finally:
        await store.stop()


_OLD_SCHEMA = """
CREATE TABLE annotations (
    post_id TEXT NOT NULL, producer TEXT NOT NULL, version TEXT NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, body BLOB NOT NULL,
    PRIMARY KEY (post_id, producer, version)
) WITHOUT ROWID;
"""


async def test_a_store_written_before_fingerprints_is_migrated_and_readable(tmp_path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(_OLD_SCHEMA)
    old_body = json.dumps({"post_id": "p1", "producer": "basic", "version": "1",
                           "labels": ["old"], "created_at": 1.0, "updated_at": 1.0})
    conn.execute("INSERT INTO annotations VALUES ('p1', 'basic', '1', 1.0, 1.0, ?)",
                 (old_body.encode(),))
    conn.commit()
    conn.close()

    store = SqliteStore(path)
    await store.start()
    try:
        (old,) = await store.get("p1")
        assert old.labels == ["old"] and old.content_fingerprint == ""
        await store.upsert([_annotation(FIRST, labels=["new"])])  # unknown: accepted
        with pytest.raises(PostIdReusedError):
            await store.upsert([_annotation(OTHER)])
    finally:
        await store.stop()


async def test_the_pipeline_dead_letters_a_reused_id_at_once_and_keeps_the_first(tmp_path):
    config = load_config(
        data_dir=tmp_path, streams=[{"name": "posts", "eligibilities": ["basic"]}],
        engine={"processes": 0}, metrics={"enabled": False}, output={"broker": "none"},
    )
    producer = LocalProducer(local_log(config))
    await producer.start()
    await producer.publish_many("posts", [
        (None, msgspec.json.encode({"post": p, "user": {"id": p.author_id}}))
        for p in (FIRST, FIRST, OTHER)
    ])
    await producer.stop()
    await run_until_caught_up(config)

    store = SqliteStore(config.sqlite_path)
    await store.start()
    (annotation,) = await store.get("p1")
    assert annotation.content_fingerprint == post_fingerprint(FIRST)
    await store.stop()
    log = local_log(config)
    await log.open()
    (record,) = await log.read(C.DEFAULT_DEAD_LETTER_TOPIC, [(0, 0)], 10)
    await log.close()
    letter = decode_dead_letter(record.value)
    assert (letter.reason, letter.attempts) == (C.DEAD_REASON_POST_ID_REUSED, 1)
    assert "reused with different content" in (letter.last_error or "")
