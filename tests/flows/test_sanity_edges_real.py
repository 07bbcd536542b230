"""The hand-written sanity set across the hard edges (tests/flows/data/sanity_edges.jsonl:
harmless "hate"/"kill"/"shoot", profanity in joy, ordinary posts, promotion, insults,
identity hate, threats) through the real flows with the real text models, judged per
post. The issue's bar is >= 90% agreement, not 100%, so nothing is fitted to it (the
set is never training data and never picks a threshold); AGREEMENT_FLOOR says where the
flows stand."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from grebe.core.planmaster import PlanMaster
from grebe.types import Post, TaskPayload, TaskStatus

from .conftest import real_text_models_master

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

DATA = Path(__file__).parent / "data" / "sanity_edges.jsonl"
TEXT_PLANS = frozenset({"spam_comment", "post_safety", "safety_ptos"})
HARMFUL = frozenset({"spam", "offensive", "insult", "hate", "threat"})
RESTRICTIVE = (":remove", ":limit_reach")
#: labels a post may carry beside the expected ones: an insult is offensive, and a
#: threat or identity hate is often abusive too (hate and threat together included)
TOLERATED = {"insult": {"offensive"}, "hate": {"threat", "offensive", "insult"},
             "threat": {"hate", "offensive", "insult"}}
#: The issue's bar: >= 0.90 of the posts. The flows measure 0.938 (60 of 64) with policy
#: 2026.11.28-3 (heads -6: the ThreatGram-trained threat head also calls "shut your mouth
#: you dumb bitch" a threat), 0.953 (61 of 64) with policy 2026.11.28-2 (an insult word
#: said to someone is an insult), 0.938 (60 of 64) with heads-2026.11.23-5 and policy
#: 2026.11.28-1: threats judged by their shape with the
#: head (grebe.flows.threat_speech), offensive needing a rude word, hate on a named
#: group; 0.766 with policy 2026.11.23-6 (docs/quality.md). None of those rules was
#: fitted to this set: each was chosen on real corpora's train/val splits.
AGREEMENT_FLOOR = 0.90


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def master() -> AsyncIterator[PlanMaster]:
    async with real_text_models_master() as started:
        yield started


def agrees(expected: set[str], labels: set[str]) -> bool:
    """Every expected label fired, no other harmful label did (beyond TOLERATED), and a
    post that should get nothing gets no remove/limit action."""
    allowed = expected.union(*(TOLERATED.get(label, set()) for label in expected))
    harmful = labels & HARMFUL
    restrictive = [label for label in labels if label.endswith(RESTRICTIVE)]
    return expected <= harmful and harmful <= allowed and not (restrictive and not expected)


async def test_sanity_edges_agree_through_the_flows(master: PlanMaster) -> None:
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    assert len(rows) >= 60
    misses = []
    for i, row in enumerate(rows):
        # one author per post: the enforcement history must not escalate across posts
        post = Post(id=f"edge-{i}", author_id=f"author-{i}", text=row["text"])
        results = await master.run_plans(TaskPayload(payload_id=post.id, post=post,
                                                     eligibilities=TEXT_PLANS))
        assert all(r.status == TaskStatus.SUCCESS for r in results), [r.error for r in results]
        labels = set().union(*(r.output.labels for r in results))
        if not agrees(set(row["expected"]), labels):
            misses.append((row["text"], row["expected"], sorted(labels)))
    agreement = 1 - len(misses) / len(rows)
    assert agreement >= AGREEMENT_FLOOR, f"agreement {agreement:.3f}; misses: {misses}"
