"""Calls of one event-loop turn are scored in one batched call (the text heads)."""

from __future__ import annotations

import asyncio

import pytest

from grebe.errors import InferenceError
from grebe.inference.turn_batch import TurnBatcher


def doubled(items: list[int]) -> list[int]:
    if any(i < 0 for i in items):
        raise ValueError(f"negative in {items}")
    return [2 * i for i in items]


async def test_tasks_resumed_together_share_one_call() -> None:
    turns: TurnBatcher[int, int] = TurnBatcher()
    gate = asyncio.get_running_loop().create_future()

    async def caller(i: int) -> int:
        await gate  # like posts resumed by one encoder batch
        return await turns.submit("m", doubled, i)

    tasks = [asyncio.create_task(caller(i)) for i in range(16)]
    await asyncio.sleep(0)
    gate.set_result(None)
    assert await asyncio.gather(*tasks) == [2 * i for i in range(16)]
    assert (turns.batches, turns.items) == (1, 16)


async def test_a_bad_item_fails_only_its_caller() -> None:
    turns: TurnBatcher[int, int] = TurnBatcher()
    results = await asyncio.gather(*(turns.submit("m", doubled, i) for i in (1, -1, 3)),
                                   return_exceptions=True)
    assert results[0] == 2 and results[2] == 6
    assert isinstance(results[1], ValueError)


async def test_a_wrong_number_of_results_is_an_inference_error() -> None:
    turns: TurnBatcher[int, int] = TurnBatcher()
    with pytest.raises(InferenceError, match="returned 0 results for 1 items"):
        await turns.submit("m", lambda items: [], 1)


async def test_a_cancelled_caller_is_left_out_and_keys_batch_apart() -> None:
    turns: TurnBatcher[int, int] = TurnBatcher()
    seen: list[list[int]] = []

    def record(items: list[int]) -> list[int]:
        seen.append(items)
        return items

    gone = turns.submit("a", record, 1)
    gone.cancel()
    kept = turns.submit("a", record, 2)
    other = turns.submit("b", record, 3)
    assert (await kept, await other) == (2, 3)
    assert seen == [[2], [3]]
