"""The text heads' verdicts are judged once per payload, text, gate and thresholds
(grebe.flows.verdict_memo), however many plans and tasks ask, and every plan's output
still names the models it was judged with."""

from __future__ import annotations

from typing import Any

import pytest

from grebe.flows import judge

from .test_heads_flows import heads_services, run

SPAMMY = "buy cheap pills, click the free offer now"


@pytest.fixture
def judged(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, bool]]:
    """(plan, text, gate) of every judge.verdicts call on a non-blank text."""
    calls: list[tuple[str, str, bool]] = []
    original = judge.verdicts

    async def counting(ctx: Any, text: str, *, gate: bool = True) -> Any:
        if text.strip():
            calls.append((ctx.plan, text, gate))
        return await original(ctx, text, gate=gate)

    monkeypatch.setattr(judge, "verdicts", counting)
    return calls


async def test_three_plans_judge_a_text_once(judged: list[tuple[str, str, bool]]) -> None:
    services = heads_services()
    out = await run(services, SPAMMY)
    # spam_comment (two tasks), post_safety and safety_ptos (three tasks) all read the
    # post text: one computation for the payload.
    assert [(text, gate) for _, text, gate in judged] == [(SPAMMY, True)]
    assert out["spam_comment"].labels == ["spam"]
    assert "spam" in out["safety_ptos"].labels
    for plan in ("spam_comment", "post_safety", "safety_ptos"):
        assert out[plan].model_versions["heads"] == "heads-test-1", plan
        assert out[plan].model_versions["embedder"] == services.models.embedder.name, plan


async def test_plans_with_other_thresholds_are_judged_apart(
        judged: list[tuple[str, str, bool]]) -> None:
    services = heads_services({"spam_comment": {"head_thresholds": {"spam.spam": 0.99}}})
    out = await run(services, SPAMMY)
    plans = [plan for plan, _, _ in judged]
    assert "spam_comment" in plans and "post_safety" in plans, plans
    assert out["spam_comment"].labels == ["not_spam"]
    assert out["spam_comment"].reasons["spam"] == "head spam 0.95 < 0.99 (policy)"
    assert "spam" in out["safety_ptos"].labels  # its own (validation) threshold


async def test_thresholds_changed_in_place_are_judged_apart(
        judged: list[tuple[str, str, bool]]) -> None:
    """The thresholds' part of the key is remembered per settings dict: a dict changed in
    place after a run gets a new key, so the changed plan is not served the others'
    verdicts."""
    services = heads_services({"spam_comment": {"head_thresholds": {"spam.spam": 0.5}}})
    safety = services.settings.plan("post_safety").head_thresholds
    spam = services.settings.plan("spam_comment").head_thresholds
    safety.clear()
    safety.update(spam)
    await run(services, SPAMMY)
    judged.clear()
    spam["spam.spam"] = 0.99  # spam_comment's thresholds now differ from post_safety's
    out = await run(services, SPAMMY)
    plans = [plan for plan, _, _ in judged]
    assert "spam_comment" in plans and "post_safety" in plans, plans
    assert out["spam_comment"].labels == ["not_spam"]
