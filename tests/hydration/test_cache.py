"""TTL cache and in-flight de-duplication in front of a loader (a unit-test double)."""

import asyncio

from grebe.errors import HydrationUnavailableError
from grebe.hydration.cache import CachedLoader
from grebe.types import Post, User


class HeldLoader:
    """Answers only when released, and counts calls: what the cache must save."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.release = asyncio.Event()
        self.fail: Exception | None = None

    async def get_posts(self, ids):
        self.calls.append(list(ids))
        await self.release.wait()
        if self.fail:
            raise self.fail
        return {i: Post(id=i, author_id="a") for i in ids if i != "missing"}

    async def get_users(self, ids):
        return {i: User(id=i) for i in ids}

    async def recent_posts(self, author_id, n):
        self.calls.append([f"recent:{author_id}:{n}"])
        return [Post(id=f"r{k}", author_id=author_id) for k in range(n)]

    async def start(self):
        pass

    async def stop(self):
        pass


async def test_concurrent_lookups_of_one_id_share_one_fetch():
    loader = HeldLoader()
    cache = CachedLoader(loader, ttl_s=60, maxsize=100)
    lookups = [asyncio.create_task(cache.get_posts(["p1", "missing"])) for _ in range(20)]
    await asyncio.sleep(0)
    assert loader.calls == [["p1", "missing"]]  # one fetch in flight for all twenty
    loader.release.set()
    results = await asyncio.gather(*lookups)
    assert all(list(r) == ["p1"] for r in results)
    assert (await cache.get_posts(["p1"]))["p1"].id == "p1"
    assert loader.calls == [["p1", "missing"]]  # then served from the cache
    await cache.get_posts(["missing"])
    assert loader.calls[-1] == ["missing"]  # a miss is not cached: it may be recorded soon


async def test_a_missing_user_is_not_looked_up_again_within_the_miss_ttl():
    loader = HeldLoader()
    looked_up: list[list[str]] = []

    async def get_users(ids):
        looked_up.append(list(ids))
        return {}

    loader.get_users = get_users
    cache = CachedLoader(loader, ttl_s=60, maxsize=100, miss_ttl_s=60)
    assert await cache.get_users(["ghost"]) == {}
    assert await cache.get_users(["ghost"]) == {}
    assert looked_up == [["ghost"]]
    cache.remember([], [User(id="ghost")])  # recorded here since: found at once
    assert "ghost" in await cache.get_users(["ghost"])


async def test_entries_expire_after_the_ttl():
    loader = HeldLoader()
    loader.release.set()
    cache = CachedLoader(loader, ttl_s=0.05, maxsize=100)
    await cache.get_posts(["p1"])
    await asyncio.sleep(0.1)
    await cache.get_posts(["p1"])
    assert loader.calls == [["p1"], ["p1"]]


async def test_a_failed_fetch_fails_every_waiter_and_caches_nothing():
    loader = HeldLoader()
    loader.fail = HydrationUnavailableError("down")
    cache = CachedLoader(loader, ttl_s=60, maxsize=100)
    lookups = [asyncio.create_task(cache.get_posts(["p1"])) for _ in range(5)]
    await asyncio.sleep(0)
    loader.release.set()
    results = await asyncio.gather(*lookups, return_exceptions=True)
    assert all(isinstance(r, HydrationUnavailableError) for r in results)
    loader.fail = None
    assert "p1" in await cache.get_posts(["p1"])
    assert len(loader.calls) == 2


async def test_recent_posts_are_cached_per_author():
    loader = HeldLoader()
    cache = CachedLoader(loader, ttl_s=60, maxsize=100)
    first = await cache.recent_posts("a", 3)
    assert [p.id for p in first] == ["r0", "r1", "r2"]
    assert [p.id for p in await cache.recent_posts("a", 2)] == ["r0", "r1"]
    assert loader.calls == [["recent:a:3"]]


async def test_remember_writes_through():
    loader = HeldLoader()
    cache = CachedLoader(loader, ttl_s=60, maxsize=100)
    cache.remember([Post(id="p9", author_id="z")], [User(id="z")])
    assert "p9" in await cache.get_posts(["p9"]) and "z" in await cache.get_users(["z"])
    assert loader.calls == []
