"""PTOS depth: the categories without labelled data (two signals each), subtypes and
their actions, child safety's second reader (disagreement -> needs_review), sexual text
cross-validated against the images, and the enforcement history."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grebe.core.planmaster import PlanMaster
from grebe.flows import registry
from grebe.flows.enforcement import EnforcementHistory
from grebe.flows.ptos import ENFORCEMENT_SERVICE
from grebe.flows.services import FlowServices, MediaFacts
from grebe.inference.fakes import ScriptedChatModel
from grebe.stores.base import MemoryStore
from grebe.stores.sqlite import SqliteStore
from grebe.types import Media, TaskStatus

from .conftest import fake_services, payload
from .test_heads_flows import heads_services
from .test_llm import RECORDED, _prompt_of

PTOS = frozenset({"safety_ptos"})
IMAGE = (Media(kind="image", url="https://img.example/a.jpg"),)
NO_DEDUPE = {"defaults": {"dedupe_ttl_s": 0}}


async def ptos(services: FlowServices, text: str, **post: Any) -> Any:
    post.setdefault("lang", "en")
    [result] = await PlanMaster(registry.PLANS, services=services).run_plans(
        payload(text, eligibilities=PTOS, **post))
    assert result.status == TaskStatus.SUCCESS, result.error
    return result.output


def actions(out: Any) -> list[str]:
    return [label for label in out.labels if ":" in label]


async def test_child_safety_text_alone_goes_to_review_not_to_an_action() -> None:
    # The first reader (word lists) matches; the second (media / sexual head) does not.
    out = await ptos(fake_services(NO_DEDUPE), "selling nude pics of an underage schoolgirl")
    assert "needs_review" in out.labels and "child_safety:review" in actions(out)
    assert "child_safety:remove_and_report" not in out.labels
    why = out.reasons["review.child_safety"]
    assert "first check matched" in why and "second check found no violation" in why


async def test_child_safety_second_reader_alone_also_goes_to_review() -> None:
    # No sexual words (first reader: no match), but a minor with an NSFW image.
    services = fake_services(NO_DEDUPE, facts=MediaFacts(nsfw=(0.92,), items=1))
    out = await ptos(services, "my kid at the beach today", media=IMAGE)
    assert "needs_review" in out.labels and "child_safety:review" in actions(out)
    assert "second check found violation" in out.reasons["review.child_safety"]


async def test_child_safety_both_readers_agree_then_the_policy_acts() -> None:
    services = fake_services(NO_DEDUPE, facts=MediaFacts(nsfw=(0.95,), items=1))
    out = await ptos(services, "nude underage schoolgirl pics", media=IMAGE)
    assert "child_safety:remove_and_report" in out.labels
    assert "review.child_safety" not in out.reasons
    assert "confirmed: minor" in out.reasons["ptos.child_safety"]


async def test_a_child_mentioned_innocently_is_no_violation_and_no_review() -> None:
    out = await ptos(fake_services(NO_DEDUPE), "took the kids to the school play tonight")
    assert "child_safety" not in out.labels and "needs_review" not in out.labels


async def test_llm_child_safety_disagreement_goes_to_review() -> None:
    categories = json.loads(RECORDED["ptos_categories"])
    categories["child_safety"] = {"score": 0.8, "reason": "sexualises a minor"}
    answers = {**RECORDED, "ptos_categories": json.dumps(categories)}
    chat = ScriptedChatModel(lambda messages: answers[_prompt_of(messages)])
    services = fake_services({"classifier": "llm", **NO_DEDUPE}, chat=chat)
    out = await ptos(services, "some post")
    assert "needs_review" in out.labels and "child_safety:review" in out.labels
    assert "second prompt: no minor is sexualised" in out.reasons["review.child_safety"]
    assert "ptos_child_safety_check" in [_prompt_of(r) for r in chat.requests]


async def test_llm_child_safety_agreement_acts() -> None:
    categories = json.loads(RECORDED["ptos_categories"])
    categories["child_safety"] = {"score": 0.8, "reason": "sexualises a minor"}
    categories["harassment"] = {"score": 0.0, "reason": "none"}  # one policy question
    answers = {**RECORDED, "ptos_categories": json.dumps(categories),
               "ptos_policy": json.dumps({"action": "remove_and_report", "reason": "csam"}),
               "ptos_child_safety_check": json.dumps({"violation": True, "reason": "minor"})}
    chat = ScriptedChatModel(lambda messages: answers[_prompt_of(messages)])
    services = fake_services({"classifier": "llm", **NO_DEDUPE}, chat=chat)
    out = await ptos(services, "some post")
    assert "child_safety:remove_and_report" in out.labels and "needs_review" not in out.labels


async def test_illegal_goods_needs_both_lists_and_acts_per_subtype() -> None:
    services = fake_services(NO_DEDUPE)
    sale = await ptos(services, "fentanyl in stock, dm to order")
    assert {"illegal_goods", "illegal_goods.drugs", "illegal_goods:remove"} <= set(sale.labels)
    assert sale.reasons["policy.illegal_goods"].startswith("remove: subtype drugs")
    news = await ptos(services, "the fentanyl crisis keeps getting worse", post_id="p2")
    assert "illegal_goods" not in news.labels
    assert "needs both lists" in news.reasons["ptos.illegal_goods"]


async def test_civic_and_extremism_categories() -> None:
    services = fake_services(NO_DEDUPE)
    civic = await ptos(services, "no need to queue: vote by text on election day")
    assert {"civic_integrity.voting_procedure", "civic_integrity:limit_reach"} <= set(civic.labels)
    plain = await ptos(services, "remember to vote on election day", post_id="p2")
    assert "civic_integrity" not in plain.labels
    extremist = await ptos(services, "join the caliphate, pledge allegiance to isis",
                           post_id="p3")
    assert "violent_extremism:remove" in extremist.labels


async def test_sexual_text_over_clean_images_goes_to_review() -> None:
    services = fake_services(NO_DEDUPE, facts=MediaFacts(nsfw=(0.03,), items=1))
    out = await ptos(services, "new nude pics on my onlyfans", media=IMAGE)
    assert "needs_review" in out.labels
    assert "images score nsfw 0.03" in out.reasons["review.sexual"]
    explicit = fake_services(NO_DEDUPE, facts=MediaFacts(nsfw=(0.95,), items=1))
    agreed = await ptos(explicit, "new nude pics on my onlyfans", media=IMAGE)
    assert "needs_review" not in agreed.labels
    assert "sexual.solicitation" in agreed.labels and "sexual:limit_reach" in agreed.labels


async def test_repeat_offender_gets_the_strictest_action() -> None:
    services = heads_services()
    decided = []
    for i in range(4):
        out = await ptos(services, "you are a stupid idiot", post_id=f"h{i}", author="troll")
        decided.append(out.reasons["policy.harassment"])
    assert [d.split(":")[0] for d in decided] == ["limit_reach"] * 3 + ["remove"]
    assert "escalated: author has 3 prior harassment action(s)" in decided[3]
    other = await ptos(services, "you are a stupid idiot", post_id="x1", author="someone")
    assert other.reasons["policy.harassment"].startswith("limit_reach")
    # A retry of an already-judged post does not count against its author.
    again = await ptos(services, "you are a stupid idiot", post_id="h0", author="troll")
    assert again.reasons["policy.harassment"].startswith("remove")
    history = services.contribution(ENFORCEMENT_SERVICE)
    assert len(await history.prior("troll", "harassment", exclude_post="")) == 4


async def test_enforcement_history_is_bounded_and_windowed() -> None:
    now = [1000.0]
    history = EnforcementHistory(MemoryStore(), entries_per_author=3, window_s=60,
                                 clock=lambda: now[0])
    for i in range(5):
        now[0] += 1
        await history.record("a", f"p{i}", "spam", "remove")
    kept = await history.prior("a", "spam", exclude_post="")
    assert [e.post_id for e in kept] == ["p2", "p3", "p4"]  # the newest three
    now[0] += 120
    assert await history.prior("a", "spam", exclude_post="") == []


async def test_enforcement_history_survives_a_restart_on_sqlite(tmp_path: Path) -> None:
    first = SqliteStore(tmp_path / "a.db")
    await first.start()
    try:
        history = EnforcementHistory(first, entries_per_author=8, window_s=3600)
        for i in range(3):
            await history.record("troll", f"h{i}", "harassment", "limit_reach")
    finally:
        await first.stop()
    again = SqliteStore(tmp_path / "a.db")
    await again.start()
    try:
        services = heads_services()
        services.store = again
        services.contributed[ENFORCEMENT_SERVICE] = EnforcementHistory(
            again, entries_per_author=8, window_s=3600)
        out = await ptos(services, "you are a stupid idiot", post_id="h3", author="troll")
        assert out.reasons["policy.harassment"].startswith("remove")
        assert "3 prior harassment action(s)" in out.reasons["policy.harassment"]
    finally:
        await again.stop()
