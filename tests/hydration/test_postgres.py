"""The post table on a real PostgreSQL, and id-only messages hydrated end to end on it."""

import json
import uuid

import asyncpg
import pytest

from grebe import constants as C
from grebe.app.supervisor import Runtime
from grebe.brokers.factory import local_log
from grebe.brokers.local import LocalProducer
from grebe.config import load_config
from grebe.hydration.postgres import PostgresPostTable
from grebe.stores.sqlite import SqliteStore
from grebe.types import Post, User

pytestmark = pytest.mark.integration


@pytest.fixture
async def prefix(postgres_dsn):
    prefix = f"hyd_{uuid.uuid4().hex[:10]}"
    yield prefix
    conn = await asyncpg.connect(postgres_dsn)
    await conn.execute(f"DROP TABLE IF EXISTS {prefix}_posts; DROP TABLE IF EXISTS {prefix}_users")
    await conn.close()


async def test_record_and_lookups(postgres_dsn, prefix):
    table = PostgresPostTable(postgres_dsn, prefix)
    await table.start()
    try:
        posts = [Post(id=f"p{i}", author_id="a", text=f"t{i}", created_at=float(i))
                 for i in range(4)]
        # Two writes of one id in one group: the later wins, no "affect row twice" error.
        await table.record([*posts, Post(id="p0", author_id="a", text="again")],
                           [User(id="a", bio="bio")])
        assert (await table.get_posts(["p0", "x"]))["p0"].text == "again"
        assert [p.id for p in await table.recent_posts("a", 2)] == ["p3", "p2"]
        assert (await table.get_users(["a"]))["a"].bio == "bio"
    finally:
        await table.stop()


async def _ingest(config, topic, values):
    producer = LocalProducer(local_log(config))
    await producer.start()
    await producer.publish_many(topic, [(None, json.dumps(v).encode()) for v in values])
    await producer.stop()


async def _run_until_caught_up(config):
    runtime = Runtime(config)
    await runtime.start()
    await runtime.wait_caught_up()
    await runtime.stop()
    return runtime


async def test_id_only_messages_hydrated_end_to_end_on_postgres(tmp_path, postgres_dsn, prefix):
    """A firehose stream records full posts in PostgreSQL (noop plan); a request stream
    then carries only ids, and the basic plan annotates the hydrated text."""
    config = load_config(
        data_dir=tmp_path, engine={"processes": 1}, metrics={"enabled": False},
        streams=[{"name": "firehose", "topic": "firehose", "eligibilities": ["noop"]},
                 {"name": "requests", "topic": "requests", "eligibilities": ["basic"]}],
        hydration={"backend": "postgres", "postgres_dsn": postgres_dsn,
                   "postgres_table_prefix": prefix},
    )
    await _ingest(config, "firehose", [
        {"post": {"id": "h1", "author_id": "fred", "text": "LOUD NOISES EVERYWHERE"}}])
    await _run_until_caught_up(config)
    await _ingest(config, "requests", [{"post": {"id": "h1"}}, {"post": {"id": "ghost"}}])
    runtime = await _run_until_caught_up(config)
    assert runtime.dispatcher is not None and runtime.dispatcher.stats.dead == 0
    store = SqliteStore(config.sqlite_path)
    await store.start()
    try:
        (annotation,) = await store.get("h1")
        assert annotation.labels == ["shouting"]
        assert await store.get("ghost") == []  # not found: skipped, not dead-lettered
    finally:
        await store.stop()
    assert C.DEFAULT_POST_TABLE_DB not in {p.name for p in tmp_path.iterdir()}
