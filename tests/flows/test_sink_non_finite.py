"""A score or an embedding value that is NaN or infinite is the plan's failure, classified
as the post's (InferenceError: retried, then dead-lettered with the reason), and nothing
is stored or published. Before, the sink wrote it: the output topic carried `null` where
a reader expects a number (msgspec writes NaN as null) and the store kept it."""

from __future__ import annotations

import math

import pytest

from grebe.core.memo import PayloadMemo
from grebe.core.task import PlanOutput, TaskContext
from grebe.errors import InferenceError, is_system_fault
from grebe.flows.sinks import write_annotation
from grebe.stores.base import MemoryStore

from .conftest import payload


class Published:
    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes, bytes]] = []

    async def publish(self, topic: str, key: bytes, value: bytes) -> None:
        self.messages.append((topic, key, value))


def _context(output: PlanOutput) -> TaskContext:
    return TaskContext(payload=payload("a post"), plan="mm_emb_v5", results={},
                       output=output, memo=PayloadMemo(), services=None)


@pytest.mark.parametrize("output", [
    PlanOutput(labels=[], scores={"spam": math.nan}, reasons={}),
    PlanOutput(labels=[], scores={"ok": 0.5, "quality": math.inf}, reasons={}),
    PlanOutput(labels=[], scores={}, reasons={}, embedding=[0.1, -math.inf, 0.2]),
    PlanOutput(labels=[], scores={}, reasons={}, embedding=[math.nan] * 4),
], ids=["nan-score", "inf-score", "inf-in-vector", "nan-vector"])
async def test_a_non_finite_number_fails_the_plan_and_writes_nothing(output) -> None:
    store, published = MemoryStore(), Published()
    with pytest.raises(InferenceError, match="non-finite") as caught:
        await write_annotation(_context(output), store=store, producer="mm_emb_v5",
                               version="5", publisher=published, topic="annotations")
    assert not is_system_fault(caught.value)  # the post's failure: retried, dead-lettered
    assert await store.get("p1") == [] and published.messages == []


async def test_finite_numbers_are_written_and_published() -> None:
    store, published = MemoryStore(), Published()
    output = PlanOutput(labels=["x"], scores={"spam": 0.25}, reasons={},
                        embedding=[0.6, -0.8])
    await write_annotation(_context(output), store=store, producer="mm_emb_v5",
                           version="5", publisher=published, topic="annotations")
    assert [a.scores for a in await store.get("p1")] == [{"spam": 0.25}]
    assert len(published.messages) == 1
