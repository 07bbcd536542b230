"""Obfuscated identity hate through the real flows: HateCheck's spelling variations
(leet, spaced letters, a letter dropped or swapped, words run together; the committed
held-out sample in tests/inference/data, CC-BY-4.0) are judged as spelt plainly."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from grebe.core.planmaster import PlanMaster
from grebe.types import Post, TaskPayload

from .conftest import real_text_models_master

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

SAMPLE = Path(__file__).parents[1] / "inference" / "data" / "hatecheck_sample.json"
#: The flows flag 31 of the sample's 50 spelling cases as hate (23 before
#: grebe.flows.spelling); all 3,728 HateCheck cases: 0.573 -> 0.631 of the hateful ones,
#: with no non-hateful case newly flagged (docs/quality.md). A few points under that.
SPELLING_FLOOR = 0.55


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def master() -> AsyncIterator[PlanMaster]:
    async with real_text_models_master() as started:
        yield started


async def test_obfuscated_hate_is_read_as_spelt_plainly(master: PlanMaster) -> None:
    cases = [c for c in json.loads(SAMPLE.read_text())["cases"]
             if c["functionality"].startswith("spell_")]
    assert len(cases) == 50
    flagged, restored = 0, 0
    for i, case in enumerate(cases):
        post = Post(id=f"spell-{i}", author_id=f"a-{i}", text=case["text"])
        (result,) = await master.run_plans(TaskPayload(
            payload_id=post.id, post=post, eligibilities=frozenset({"post_safety"})))
        if "hate" in result.output.labels:
            flagged += 1
            restored += "read as spelt plainly" in result.output.reasons["hate"]
    assert flagged / len(cases) >= SPELLING_FLOOR, f"{flagged} of {len(cases)}"
    assert restored >= 8  # the gain is the restoration's, and its reason says so
