"""A task's time limit measures its own run, not the time its payload queued for a
shared model behind other payloads (issue 9: 36% dead-lettered on a busy host with
"embedding: TimeoutError: timed out after 30s")."""

import asyncio

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
