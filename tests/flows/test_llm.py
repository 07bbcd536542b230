"""The LLM classifier path with a recorded-response chat double (fast); the same flows
against a real OpenAI-compatible server are in test_llm_server.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grebe.core.planmaster import PlanMaster
from grebe.errors import ConfigError
from grebe.flows import registry
from grebe.flows.llm import PromptBook
from grebe.inference.fakes import ScriptedChatModel
from grebe.types import TaskStatus

from .conftest import fake_services, payload

RECORDED = json.loads((Path(__file__).parent / "data" / "llm_recorded.json").read_text())
BOOK = PromptBook()


def _prompt_of(messages) -> str:
    """Which template produced this conversation (by its system prompt's opening)."""
    system = messages[0]["content"]
    for name in RECORDED:
        first_line = BOOK._load(name)[0].template.split("\n")[0][:30]
        if system.startswith(first_line):
            return name
    raise AssertionError(f"unknown prompt: {system[:60]}")


def recorded_chat() -> ScriptedChatModel:
    return ScriptedChatModel(lambda messages: RECORDED[_prompt_of(messages)])


def test_prompt_book_renders_both_sections() -> None:
    messages = BOOK.render("reply_ranking", text="the reply", parent="the post")
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "the reply" in messages[1]["content"] and "the post" in messages[1]["content"]


def test_prompt_book_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no prompt template"):
        BOOK.render("nope")
    with pytest.raises(ConfigError, match=r"\$text"):
        BOOK.render("spam")
    (tmp_path / "spam.md").write_text("just text, no sections")
    with pytest.raises(ConfigError, match="## system"):
        PromptBook(tmp_path).render("spam", text="x")
    (tmp_path / "spam.md").write_text("## system\nS $text\n## user\nU")
    assert PromptBook(tmp_path).render("spam", text="x")[0]["content"] == "S x"


async def test_every_classifier_uses_the_chat_model_when_configured() -> None:
    chat = recorded_chat()
    services = fake_services({"classifier": "llm"}, chat=chat)
    master = PlanMaster(registry.PLANS, services=services)
    post = payload("you idiot, this coffee is great", parent="Best coffee in town?")
    results = {r.plan: r for r in await master.run_plans(post)}
    assert all(r.status == TaskStatus.SUCCESS for r in results.values()), {
        p: r.error for p, r in results.items()}
    out = {p: r.output for p, r in results.items()}
    assert out["spam_comment"].labels == ["spam"]
    assert out["spam_comment"].reasons["spam"].startswith("Unsolicited")
    assert out["post_safety"].labels == ["offensive"]
    assert out["safety_ptos"].labels == ["harassment", "harassment:limit_reach"]
    assert out["safety_ptos"].reasons["policy.harassment"].startswith("limit_reach")
    assert "banger_candidate" in out["banger_initial_screen"].labels
    assert "topic:coffee" in out["banger_initial_screen"].labels
    assert out["reply_ranking"].labels == ["reply_score:3"]
    assert out["spam_comment"].model_versions["chat"] == "scripted-chat"
    prompts = sorted(_prompt_of(r) for r in chat.requests)
    # ptos_policy is asked once: only harassment matched its threshold; the second
    # child-safety prompt is not asked: child_safety scored 0 (below its check floor).
    assert prompts == sorted(set(RECORDED) - {"ptos_child_safety_check"})


async def test_invalid_answer_gets_one_repair_then_fails_the_plan() -> None:
    chat = ScriptedChatModel(['{"spam": "maybe"}', '{"spam": true}'])
    services = fake_services({"classifier": "llm"}, chat=chat)
    master = PlanMaster(registry.PLANS, services=services)
    (result,) = await master.run_plans(payload("x", eligibilities=frozenset({"spam_comment"})))
    assert result.status == TaskStatus.FAILED
    assert "classify" in result.task_errors and len(chat.requests) == 2


async def test_llm_backend_without_chat_model_is_a_clear_failure() -> None:
    services = fake_services({"spam_comment": {"classifier": "llm"}})
    master = PlanMaster(registry.PLANS, services=services)
    (result,) = await master.run_plans(payload("x", eligibilities=frozenset({"spam_comment"})))
    assert result.status == TaskStatus.FAILED
    assert "no chat model is configured" in result.error


async def test_llm_path_runs_no_local_text_model() -> None:
    """With the chat model as classifier, the local heads are not also run and thrown
    away: no embedding, no spam head, no offensive or hate model call."""
    services = fake_services({"classifier": "llm"}, chat=recorded_chat())
    calls: list[str] = []

    def counting(name: str, method):  # wrap a model method to record each call
        async def wrapped(*args, **kwargs):
            calls.append(name)
            return await method(*args, **kwargs)
        return wrapped

    services.models.embedder.embed = counting("embedder", services.models.embedder.embed)
    services.models.offensive.classify = counting("offensive", services.models.offensive.classify)
    services.models.hate.classify = counting("hate", services.models.hate.classify)
    score = services.models.spam_head.score
    services.models.spam_head.score = lambda e: (calls.append("spam_head"), score(e))[1]
    classifiers = frozenset({"spam_comment", "post_safety", "safety_ptos",
                             "banger_initial_screen", "reply_ranking"})
    post = payload("you idiot, this coffee is great", parent="Best coffee in town?",
                   eligibilities=classifiers)
    results = await PlanMaster(registry.PLANS, services=services).run_plans(post)
    assert all(r.status == TaskStatus.SUCCESS for r in results), [r.error for r in results]
    assert calls == []
    for result in results:
        assert set(result.output.model_versions) <= {"chat", "language"}, result.plan
