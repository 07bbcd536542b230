from __future__ import annotations

import asyncio

import pytest

from grebe.core.memo import PayloadMemo, SharedCache


class Counter:
    """A factory that counts its calls and can be held until released."""

    def __init__(self, value: object = "v", error: Exception | None = None) -> None:
        self.calls = 0
        self.value = value
        self.error = error
        self.release = asyncio.Event()

    async def __call__(self) -> object:
        self.calls += 1
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return self.value


def leaked() -> set[asyncio.Task[object]]:
    return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]


# --- PayloadMemo ---


async def test_memo_runs_one_computation_for_50_concurrent_callers() -> None:
    memo = PayloadMemo()
    factory = Counter(value=[1, 2, 3])
    waiters = [asyncio.create_task(memo.get_or_compute("emb", factory)) for _ in range(50)]
    await asyncio.sleep(0)
    factory.release.set()
    results = await asyncio.gather(*waiters)
    assert factory.calls == 1
    assert all(r is results[0] for r in results)  # the very same object
    assert await memo.get_or_compute("emb", factory) is results[0]  # later callers too
    assert factory.calls == 1
    assert "emb" in memo and len(memo) == 1


async def test_memo_shares_the_exception_with_every_caller() -> None:
    memo = PayloadMemo()
    factory = Counter(error=ValueError("model down"))
    waiters = [asyncio.create_task(memo.get_or_compute("k", factory)) for _ in range(50)]
    await asyncio.sleep(0)
    factory.release.set()
    outcomes = await asyncio.gather(*waiters, return_exceptions=True)
    assert factory.calls == 1
    assert all(isinstance(o, ValueError) and str(o) == "model down" for o in outcomes)
    with pytest.raises(ValueError, match="model down"):  # not retried within the payload
        await memo.get_or_compute("k", factory)
    assert factory.calls == 1


async def test_memo_keys_are_independent() -> None:
    memo = PayloadMemo()
    a, b = Counter("a"), Counter("b")
    a.release.set()
    b.release.set()
    assert await memo.get_or_compute("a", a) == "a"
    assert await memo.get_or_compute("b", b) == "b"
    assert (a.calls, b.calls) == (1, 1)


async def test_memo_factory_raising_synchronously_is_a_failed_computation() -> None:
    memo = PayloadMemo()

    def factory() -> object:
        raise KeyError("no such media")

    with pytest.raises(KeyError):
        await memo.get_or_compute("k", factory)  # type: ignore[arg-type]


async def test_memo_cancelled_caller_does_not_abort_the_shared_computation() -> None:
    memo = PayloadMemo()
    factory = Counter("done")
    impatient = asyncio.create_task(memo.get_or_compute("k", factory))
    patient = asyncio.create_task(memo.get_or_compute("k", factory))
    await asyncio.sleep(0)
    impatient.cancel()
    with pytest.raises(asyncio.CancelledError):
        await impatient
    factory.release.set()
    assert await patient == "done"
    assert factory.calls == 1


async def test_memo_timed_out_caller_leaves_result_for_others() -> None:
    memo = PayloadMemo()
    factory = Counter("late")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await memo.get_or_compute("k", factory)
    assert memo.has_pending
    factory.release.set()
    assert await memo.get_or_compute("k", factory) == "late"
    assert factory.calls == 1
    assert not memo.has_pending


async def test_memo_aclose_cancels_pending_and_refuses_new_work() -> None:
    memo = PayloadMemo()
    factory = Counter()
    waiter = asyncio.create_task(memo.get_or_compute("k", factory))
    await asyncio.sleep(0)
    assert memo.has_pending
    await memo.aclose()
    assert not memo.has_pending
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not leaked()
    with pytest.raises(RuntimeError, match="closed"):
        await memo.get_or_compute("other", factory)


# --- SharedCache ---


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_cache_deduplicates_concurrent_computations_and_caches_success() -> None:
    cache = SharedCache(maxsize=10, ttl_s=60)
    factory = Counter("x")
    waiters = [asyncio.create_task(cache.get_or_compute("k", factory)) for _ in range(50)]
    await asyncio.sleep(0)
    factory.release.set()
    assert await asyncio.gather(*waiters) == ["x"] * 50
    assert await cache.get_or_compute("k", factory) == "x"
    assert factory.calls == 1
    assert cache.get("k") == "x" and "k" in cache and len(cache) == 1


async def test_cache_does_not_cache_failures_but_shares_them_with_waiters() -> None:
    cache = SharedCache(maxsize=10, ttl_s=60)
    failing = Counter(error=RuntimeError("flaky"))
    waiters = [asyncio.create_task(cache.get_or_compute("k", failing)) for _ in range(20)]
    await asyncio.sleep(0)
    failing.release.set()
    outcomes = await asyncio.gather(*waiters, return_exceptions=True)
    assert failing.calls == 1
    assert all(isinstance(o, RuntimeError) for o in outcomes)
    assert "k" not in cache
    good = Counter("ok")
    good.release.set()
    assert await cache.get_or_compute("k", good) == "ok"  # a new attempt computes again
    assert good.calls == 1


async def test_cache_entries_expire_after_ttl() -> None:
    clock = FakeClock()
    cache = SharedCache(maxsize=10, ttl_s=5, timer=clock)
    factory = Counter("v1")
    factory.release.set()
    await cache.get_or_compute("k", factory)
    clock.now += 4.9
    await cache.get_or_compute("k", factory)
    assert factory.calls == 1
    clock.now += 0.2  # 5.1 s after it was stored
    assert cache.get("k") is None and len(cache) == 0
    factory.value = "v2"
    assert await cache.get_or_compute("k", factory) == "v2"
    assert factory.calls == 2


async def test_cache_is_bounded_by_maxsize() -> None:
    cache = SharedCache(maxsize=3, ttl_s=60)
    for i in range(5):
        factory = Counter(i)
        factory.release.set()
        await cache.get_or_compute(f"k{i}", factory)
    assert len(cache) == 3
    assert "k0" not in cache and "k1" not in cache
    assert all(f"k{i}" in cache for i in (2, 3, 4))


async def test_cache_caches_none_and_invalidate_forgets() -> None:
    cache = SharedCache(maxsize=3, ttl_s=60)
    factory = Counter(None)
    factory.release.set()
    assert await cache.get_or_compute("k", factory) is None
    assert await cache.get_or_compute("k", factory) is None
    assert factory.calls == 1
    cache.invalidate("k")
    await cache.get_or_compute("k", factory)
    assert factory.calls == 2


async def test_cache_aclose_cancels_computations_in_flight() -> None:
    cache = SharedCache(maxsize=3, ttl_s=60)
    factory = Counter()
    waiter = asyncio.create_task(cache.get_or_compute("k", factory))
    await asyncio.sleep(0)
    await cache.aclose()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not leaked()


@pytest.mark.parametrize(("maxsize", "ttl_s"), [(0, 1.0), (10, 0), (10, -1), (10, float("nan"))])
def test_cache_rejects_bad_bounds(maxsize: int, ttl_s: float) -> None:
    with pytest.raises(ValueError):
        SharedCache(maxsize=maxsize, ttl_s=ttl_s)


# --- a memo adopting the cache's computation (grebe.flows.shared.shared) ---


async def test_memo_adopts_a_cache_computation_and_leaves_it_running_on_close() -> None:
    cache = SharedCache(maxsize=8, ttl_s=60)
    factory = Counter(value="vec")
    first, second = PayloadMemo(), PayloadMemo()
    adopted = first.adopt("emb", lambda: cache.future("emb", factory))
    assert first.entry("emb") is adopted and "emb" in first
    # The other payload's memo shares the same computation in flight.
    assert second.adopt("emb", lambda: cache.future("emb", factory)) is adopted
    assert not first.has_pending  # nothing of its own to cancel
    await first.aclose()  # the payload is done: another still waits for the value
    assert not adopted.done()
    factory.release.set()
    assert await second.entry("emb") == "vec"  # type: ignore[misc]
    assert factory.calls == 1
    # A value already cached is a finished future: no task at all.
    tasks = len(asyncio.all_tasks())
    cached = PayloadMemo().adopt("emb", lambda: cache.future("emb", factory))
    assert cached.done() and cached.result() == "vec" and len(asyncio.all_tasks()) == tasks
    with pytest.raises(RuntimeError, match="closed"):
        first.adopt("other", lambda: cache.future("other", factory))
    await second.aclose()
    assert not leaked()
