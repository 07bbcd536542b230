"""A task's time limit measures its own run, not the time its payload queued for a
shared model behind other payloads (issue 9: 36% dead-lettered on a busy host with
"embedding: TimeoutError: timed out after 30s")."""

import asyncio
import time

from grebe.core.deadlines import WaitLedger
from grebe.core.plan import Plan
from grebe.core.planmaster import PlanMaster
from grebe.inference.batcher import MicroBatcher
from grebe.types import Post, TaskPayload

BATCH_S = 0.3  # one model call; max_batch_size=1 makes the queue long


def _payload(i: int) -> TaskPayload:
    return TaskPayload(
        payload_id=f"s:0:{i}", post=Post(id=f"p{i}", author_id="a", text=f"t{i}"),
        eligibilities=frozenset({"e"}),
    )


async def _model(items: list[str]) -> list[str]:
    await asyncio.sleep(BATCH_S)
    return [f"vec:{item}" for item in items]


async def _slow_model(items: list[str]) -> list[str]:
    await asyncio.sleep(1.0)
    return items


async def _run_all(batcher: MicroBatcher, *, via_memo: bool, limit_s: float, n: int):
    async def embed(ctx):
        text = ctx.payload.post.text
        if via_memo:  # as the flows do: one computation shared by the payload's plans
            return await ctx.memo.get_or_compute("embedding", lambda: batcher.submit(text))
        return await batcher.submit(text)

    master = PlanMaster([Plan("p", {"embed": embed}, eligibility="e", task_timeout_s=limit_s)])
    await batcher.start()
    try:
        return await asyncio.gather(*(master.run(_payload(i)) for i in range(n)))
    finally:
        await batcher.stop()


async def test_queue_wait_for_a_model_does_not_count_against_the_limit() -> None:
    # Six payloads, one model call at a time: the last waits 1.5 s, runs 0.3 s, limit 0.8 s.
    batcher = MicroBatcher(_model, max_batch_size=1, max_wait_ms=0, name="test-wait")
    results = await _run_all(batcher, via_memo=False, limit_s=0.8, n=6)
    assert [r.error for r in results] == [None] * 6
    assert all(r.success for r in results)


async def test_queue_wait_behind_a_shared_memo_does_not_count_either() -> None:
    batcher = MicroBatcher(_model, max_batch_size=1, max_wait_ms=0, name="test-wait-memo")
    results = await _run_all(batcher, via_memo=True, limit_s=0.8, n=6)
    assert all(r.success for r in results), [r.error for r in results]


async def test_a_model_call_slower_than_the_limit_still_times_out() -> None:
    batcher = MicroBatcher(_slow_model, max_batch_size=1, max_wait_ms=0, name="test-slow")
    (result,) = await _run_all(batcher, via_memo=False, limit_s=0.5, n=1)
    assert not result.success
    assert result.error == "p/embed: TimeoutError: timed out after 0.5s"
    assert not result.system_fault


# Two sequential model calls per payload, 64 payloads per batch, at 0.25 s a text against
# the 30 s default limit (docs/architecture.md, "Waiting is not running"), scaled by
# SCALE so the test sleeps 1.6 s rather than 32 s: each batch computes for 64 texts'
# time, so the two batches outrun the limit although each payload's own share is 1/64.
SCALE = 1 / 20
SECONDS_PER_TEXT = 0.25 * SCALE
LIMIT_S = 30.0 * SCALE
PAYLOADS = 64


def _slow_per_text(items: list[str]) -> list[str]:
    time.sleep(SECONDS_PER_TEXT * len(items))  # in the batcher's thread, as a real model
    return [f"vec:{item}" for item in items]


async def test_two_sequential_batched_calls_get_the_other_payloads_share_credited() -> None:
    batcher = MicroBatcher(_slow_per_text, max_batch_size=PAYLOADS, max_wait_ms=50,
                           name="test-batch-share")

    async def embed_then_summary(ctx):
        text = ctx.payload.post.text
        await batcher.submit(text)
        return await batcher.submit(f"summary of {text}")

    master = PlanMaster([Plan("p", {"embed": embed_then_summary}, eligibility="e",
                              task_timeout_s=LIMIT_S)])
    await batcher.start()
    try:
        results = await asyncio.gather(*(master.run(_payload(i)) for i in range(PAYLOADS)))
    finally:
        await batcher.stop()
    assert batcher.batches == 2  # the scenario: two full batches in sequence
    assert [r.error for r in results] == [None] * PAYLOADS


async def test_a_hung_call_alone_in_its_batch_still_times_out() -> None:
    # A payload whose items fill the whole batch earns no share: its limit holds.
    batcher = MicroBatcher(_slow_model, max_batch_size=PAYLOADS, max_wait_ms=0,
                           name="test-hung-alone")

    async def embed_many(ctx):
        return await batcher.submit_many(["a", "b", "c"])

    master = PlanMaster([Plan("p", {"embed": embed_many}, eligibility="e",
                              task_timeout_s=0.5)])
    await batcher.start()
    try:
        result = await master.run(_payload(0))
    finally:
        await batcher.stop()
    assert result.error == "p/embed: TimeoutError: timed out after 0.5s"


def test_the_ledger_credits_the_others_share_of_a_running_batch() -> None:
    ledger = WaitLedger()
    ledger.run_begin(0.75)  # 1 of 4 items is this payload's
    time.sleep(0.2)
    ledger.run_end(0.75)
    assert 0.75 * 0.2 <= ledger.waited() < 0.75 * 0.2 + 0.1
    before = ledger.waited()
    time.sleep(0.05)
    assert ledger.waited() == before  # nothing runs or waits: nothing is credited
