"""Two deployments on one Redis share nothing: QPS budgets and store keys live under
each deployment's `redis.namespace` (real server of scripts/services.sh)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from limits.aio.strategies import MovingWindowRateLimiter

from grebe.app.supervisor import Runtime
from grebe.brokers.factory import local_log
from grebe.brokers.local import LocalProducer
from grebe.config import load_config
from grebe.core.ratelimit import RATE_LIMIT_NAMESPACE, limiter_storage_from, qps_item
from grebe.flows.services import PlanLimiter
from grebe.stores.factory import build_store
from grebe.stores.redis import RedisStore

pytestmark = pytest.mark.integration


async def _drop(redis_url: str, *namespaces: str) -> None:
    client = aioredis.from_url(redis_url)
    try:
        for namespace in namespaces:
            keys = [k async for k in client.scan_iter(f"{namespace}:*")]
            if keys:
                await client.delete(*keys)
    finally:
        await client.aclose()


async def test_two_namespaces_do_not_share_a_stream_budget(redis_url: str) -> None:
    first, second = (f"dep-{uuid.uuid4().hex[:8]}" for _ in range(2))
    budget = qps_item(0.3)  # 1 hit per 3 s: a second hit in the window is refused
    limiters = {
        ns: MovingWindowRateLimiter(limiter_storage_from(redis_url, ns))  # type: ignore[arg-type]
        for ns in (first, second)
    }
    same_place = MovingWindowRateLimiter(limiter_storage_from(redis_url, first))  # type: ignore[arg-type]
    try:
        assert await limiters[first].hit(budget, RATE_LIMIT_NAMESPACE, "posts")
        # Same deployment (another replica): the budget is spent.
        assert not await same_place.hit(budget, RATE_LIMIT_NAMESPACE, "posts")
        # Another deployment, same stream name: its own budget.
        assert await limiters[second].hit(budget, RATE_LIMIT_NAMESPACE, "posts")
        client = aioredis.from_url(redis_url)
        keys = [k.decode() async for k in client.scan_iter(f"{first}:*")]
        await client.aclose()
        assert keys and all(k.startswith(f"{first}:limits") for k in keys)
    finally:
        await _drop(redis_url, first, second)


async def test_two_namespaces_do_not_share_a_plan_budget(redis_url: str) -> None:
    first, second = (f"dep-{uuid.uuid4().hex[:8]}" for _ in range(2))
    try:
        assert await PlanLimiter(redis_url, first).acquire("spam", 0.3, 0.0)
        assert not await PlanLimiter(redis_url, first).acquire("spam", 0.3, 0.0)
        assert await PlanLimiter(redis_url, second).acquire("spam", 0.3, 0.0)
    finally:
        await _drop(redis_url, first, second)


def test_store_keys_default_to_the_deployment_namespace(redis_url: str) -> None:
    config = load_config(store={"backend": "redis"}, redis={"url": redis_url,
                                                            "namespace": "blue"})
    store = build_store(config)
    assert isinstance(store, RedisStore) and store.key("p1") == "blue:ann:p1"
    config = load_config(store={"backend": "redis", "redis_prefix": "legacy"},
                         redis={"url": redis_url, "namespace": "blue"})
    assert build_store(config).key("p1") == "legacy:ann:p1"  # type: ignore[attr-defined]


async def test_grebe_run_counts_stream_budgets_under_its_namespace(
    tmp_path: Path, redis_url: str
) -> None:
    """The supervisor hands `redis.namespace` to the dispatcher's limiter."""
    namespace = f"dep-{uuid.uuid4().hex[:8]}"
    config = load_config(
        data_dir=tmp_path, engine={"processes": 0}, metrics={"enabled": False},
        streams=[{"name": "posts", "eligibilities": ["basic"], "max_qps": 1000}],
        rate_limits={"storage": "redis"}, redis={"url": redis_url, "namespace": namespace},
    )
    producer = LocalProducer(local_log(config))
    await producer.start()
    await producer.publish_many("posts", [
        (None, json.dumps({"id": f"p{i}", "author_id": "a", "text": "hi"}).encode())
        for i in range(5)
    ])
    await producer.stop()
    runtime = Runtime(config)
    await runtime.start()
    try:
        await runtime.wait_caught_up()
    finally:
        await runtime.stop()
    client = aioredis.from_url(redis_url)
    keys = [k.decode() async for k in client.scan_iter(f"{namespace}:limits*")]
    await client.aclose()
    await _drop(redis_url, namespace)
    assert keys, "no QPS budget keys under the deployment namespace"
