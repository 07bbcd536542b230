"""Records and the enforcement history on the real PostgreSQL of scripts/services.sh:
two engine processes (two stores on one table) share them."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from grebe.flows.enforcement import EnforcementHistory
from grebe.flows.sinks import POST_RECORD, FlagRecords
from grebe.stores.postgres import PostgresStore

pytestmark = pytest.mark.integration


@pytest.fixture
async def table(postgres_dsn: str) -> AsyncIterator[str]:
    name = f"rec_{uuid.uuid4().hex[:10]}"
    yield name
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await conn.execute(f"DROP TABLE IF EXISTS {name}")
    finally:
        await conn.close()


async def test_two_processes_share_records_and_history(postgres_dsn: str, table: str) -> None:
    one, two = PostgresStore(postgres_dsn, table=table), PostgresStore(postgres_dsn, table=table)
    await one.start()
    await two.start()
    try:
        await FlagRecords(one).merge(POST_RECORD, "p1", {"spam"}, "spam_comment", "fp1")
        merged = await FlagRecords(two).merge(POST_RECORD, "p1", {"nsfw"}, "post_safety", "fp1")
        assert merged == {"nsfw", "spam"}
        first = EnforcementHistory(one, entries_per_author=8, window_s=3600)
        second = EnforcementHistory(two, entries_per_author=8, window_s=3600)
        await first.record("troll", "h1", "harassment", "limit_reach")
        await second.record("troll", "h2", "harassment", "limit_reach")
        seen = await first.prior("troll", "harassment", exclude_post="h3")
        assert sorted(e.post_id for e in seen) == ["h1", "h2"]
    finally:
        await one.stop()
        await two.stop()
