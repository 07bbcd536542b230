"""RedisStore against the real server of scripts/services.sh."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from grebe.errors import StoreError
from grebe.stores.base import AnnotationStore
from grebe.stores.redis import RedisStore
from grebe.types import Annotation

pytestmark = pytest.mark.integration


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisStore]:
    store = RedisStore(redis_url, prefix=f"test-{uuid.uuid4().hex[:8]}")
    await store.start()
    yield store
    redis = store._started()
    keys = [k async for k in redis.scan_iter(f"{store.prefix}:*")]
    if keys:
        await redis.delete(*keys)
    await store.stop()


async def test_upsert_is_idempotent_and_keeps_created_at(store: RedisStore) -> None:
    assert isinstance(store, AnnotationStore)
    first = Annotation(post_id="p1", producer="spam", version="1", labels=["spam"],
                       scores={"spam": 0.9}, embedding=[0.5, 1.5], created_at=1000.0,
                       updated_at=1000.0)
    other = Annotation(post_id="p1", producer="ptos", version="2", created_at=1500.0)
    await store.upsert([first, other])
    rewrite = Annotation(post_id="p1", producer="spam", version="1", scores={"spam": 0.2},
                         created_at=2000.0, updated_at=2000.0)
    await store.upsert([rewrite])
    await store.upsert([rewrite])
    rows = await store.get("p1")
    assert [(a.producer, a.version) for a in rows] == [("ptos", "2"), ("spam", "1")]
    assert rows[1].created_at == 1000.0 and rows[1].updated_at == 2000.0
    assert rows[1].scores == {"spam": 0.2} and rows[1].embedding is None
    assert await store._started().hlen(store.key("p1")) == 4  # 2 keys x (body, created)
    assert await store.get("nope") == []


async def test_unreachable_redis_is_a_clear_error() -> None:
    store = RedisStore("redis://127.0.0.1:1/0")
    with pytest.raises(StoreError, match="cannot reach Redis"):
        await store.start()
