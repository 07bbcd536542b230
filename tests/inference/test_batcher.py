"""MicroBatcher: every caller gets its own result, batches form, failures and shutdown
are contained."""

from __future__ import annotations

import asyncio
import threading

import pytest

from grebe.errors import InferenceError
from grebe.inference.batcher import BatcherStoppedError, MicroBatcher


def square_all(items: list[int]) -> list[int]:
    return [i * i for i in items]


async def test_each_of_1000_concurrent_callers_gets_its_own_result() -> None:
    sizes: list[int] = []

    def fn(items: list[int]) -> list[int]:
        sizes.append(len(items))
        return [i * i for i in items]

    batcher = MicroBatcher(fn, max_batch_size=64, max_wait_ms=5, max_concurrent_batches=2)
    await batcher.start()
    try:
        results = await asyncio.gather(*(batcher.submit(i) for i in range(1000)))
    finally:
        await batcher.stop()
    assert results == [i * i for i in range(1000)]
    assert sum(sizes) == 1000
    assert max(sizes) == 64  # requests really were gathered
    assert len(sizes) < 100


async def test_batch_failure_retries_singly_so_only_the_bad_item_fails() -> None:
    def fn(items: list[int]) -> list[int]:
        if 13 in items:
            raise ValueError("poisoned input 13")
        return [-i for i in items]

    batcher = MicroBatcher(fn, max_batch_size=32, max_wait_ms=5)
    await batcher.start()
    try:
        results = await asyncio.gather(
            *(batcher.submit(i) for i in range(1000)), return_exceptions=True
        )
    finally:
        await batcher.stop()
    for i, result in enumerate(results):
        if i == 13:
            assert isinstance(result, ValueError) and "13" in str(result)
        else:
            assert result == -i


async def test_without_retry_every_caller_of_a_failed_batch_gets_the_error() -> None:
    calls = 0

    def fn(items: list[int]) -> list[int]:
        nonlocal calls
        calls += 1
        raise RuntimeError("model is broken")

    batcher = MicroBatcher(fn, max_batch_size=1000, max_wait_ms=50, retry_singly=False)
    await batcher.start()
    try:
        results = await asyncio.gather(
            *(batcher.submit(i) for i in range(1000)), return_exceptions=True
        )
    finally:
        await batcher.stop()
    assert all(isinstance(r, RuntimeError) for r in results)
    assert calls < 1000


async def test_wrong_result_count_is_an_inference_error() -> None:
    batcher = MicroBatcher(lambda items: items[:-1], max_batch_size=8, retry_singly=False)
    await batcher.start()
    try:
        with pytest.raises(InferenceError, match="returned 0 results for 1"):
            await batcher.submit(1)
    finally:
        await batcher.stop()


async def test_bounded_queue_applies_backpressure() -> None:
    gate = threading.Event()

    def fn(items: list[int]) -> list[int]:
        gate.wait(5)
        return items

    batcher = MicroBatcher(fn, max_batch_size=1, max_wait_ms=0, max_queue=4)
    await batcher.start()
    try:
        tasks = [asyncio.create_task(batcher.submit(i)) for i in range(20)]
        await asyncio.sleep(0.05)
        # one running, at most max_queue queued, the rest wait in submit()
        assert batcher.queued == 4
        assert not any(t.done() for t in tasks)
        gate.set()
        assert await asyncio.gather(*tasks) == list(range(20))
    finally:
        gate.set()
        await batcher.stop()


async def test_max_wait_sends_a_partial_batch() -> None:
    batcher = MicroBatcher(square_all, max_batch_size=100, max_wait_ms=10)
    await batcher.start()
    try:
        assert await asyncio.wait_for(batcher.submit(3), 2) == 9
        assert batcher.batches == 1
    finally:
        await batcher.stop()


async def test_stop_with_drain_finishes_pending_requests() -> None:
    batcher = MicroBatcher(square_all, max_batch_size=8, max_wait_ms=1)
    await batcher.start()
    tasks = [asyncio.create_task(batcher.submit(i)) for i in range(100)]
    await asyncio.sleep(0)  # let them enqueue
    await batcher.stop(drain=True)
    assert [t.result() for t in tasks] == [i * i for i in range(100)]
    with pytest.raises(BatcherStoppedError):
        await batcher.submit(1)


async def test_stop_without_drain_fails_every_pending_request() -> None:
    gate = threading.Event()

    def fn(items: list[int]) -> list[int]:
        gate.wait(5)
        return items

    batcher = MicroBatcher(fn, max_batch_size=4, max_wait_ms=1, max_queue=16)
    await batcher.start()
    tasks = [asyncio.create_task(batcher.submit(i)) for i in range(40)]
    await asyncio.sleep(0.05)
    await batcher.stop(drain=False)
    gate.set()
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 2)
    assert all(isinstance(r, BatcherStoppedError) for r in results)


async def test_cancelled_caller_is_dropped_and_others_are_served() -> None:
    seen: list[list[int]] = []
    gate = threading.Event()

    def fn(items: list[int]) -> list[int]:
        gate.wait(5)
        seen.append(list(items))
        return items

    batcher = MicroBatcher(fn, max_batch_size=8, max_wait_ms=1)
    await batcher.start()
    try:
        first = asyncio.create_task(batcher.submit(0))  # occupies the single slot
        await asyncio.sleep(0.02)
        doomed = asyncio.create_task(batcher.submit(1))
        kept = asyncio.create_task(batcher.submit(2))
        await asyncio.sleep(0.01)
        doomed.cancel()
        gate.set()
        assert await first == 0 and await kept == 2
        assert [1] not in seen and all(1 not in batch for batch in seen)
    finally:
        gate.set()
        await batcher.stop()


async def test_submit_before_start_is_refused() -> None:
    batcher = MicroBatcher(square_all)
    with pytest.raises(BatcherStoppedError):
        await batcher.submit(1)


def test_invalid_settings_are_rejected() -> None:
    with pytest.raises(ValueError):
        MicroBatcher(square_all, max_batch_size=0)
    with pytest.raises(ValueError):
        MicroBatcher(square_all, max_wait_ms=-1)


async def test_async_batch_function_is_awaited_and_batched() -> None:
    sizes: list[int] = []

    async def fn(items: list[str]) -> list[str]:
        sizes.append(len(items))
        await asyncio.sleep(0.01)
        return [s.upper() for s in items]

    batcher = MicroBatcher(fn, max_batch_size=50, max_wait_ms=5)
    await batcher.start()
    try:
        words = [f"w{i}" for i in range(200)]
        assert await batcher.submit_many(words) == [w.upper() for w in words]
    finally:
        await batcher.stop()
    assert sum(sizes) == 200 and max(sizes) == 50
