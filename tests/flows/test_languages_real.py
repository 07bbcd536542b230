"""The benign multilingual sanity set through the real flows with the real text models
and the real language detector: no spam, hate or remove/limit label in any language."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from grebe.core.planmaster import PlanMaster
from grebe.types import Post, TaskPayload, TaskStatus

from .conftest import real_text_models_master

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

#: Ordinary posts, one or more per language (hand-written: a sanity set, never training).
BENIGN = {
    "es": "¡Qué día tan bonito en la playa con mi familia!",
    "ja": "今日は友達とラーメンを食べました。美味しかった！",
    "nl": "Goedemorgen allemaal, fijne dag gewenst!",
    "fr": "Bonne soirée à tous, on se voit demain au marché.",
    "de": "Ich habe heute einen schönen Spaziergang im Wald gemacht.",
    "it": "Oggi ho cucinato la pasta con mia nonna, che bello!",
    "pt": "Hoje o dia está lindo, vamos à praia com as crianças.",
    "ru": "Сегодня прекрасная погода, гуляем в парке с детьми.",
    "ko": "오늘 친구들과 맛있는 저녁을 먹었어요.",
    "zh": "今天和家人一起去公园散步，天气很好。",
    "tr": "Bugün arkadaşlarımla sahilde yürüyüş yaptık, harikaydı.",
    "pl": "Dziś upiekłam ciasto z jabłkami dla całej rodziny.",
    "sv": "Idag åkte vi till stranden och badade hela dagen.",
    "en": "Had a lovely walk in the park with my kids this afternoon.",
}
TEXT_PLANS = frozenset({"spam_comment", "post_safety", "safety_ptos", "banger_initial_screen"})
FORBIDDEN = {"spam", "hate", "harassment", "violence"}
RESTRICTIVE = (":remove", ":limit_reach")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def master() -> AsyncIterator[PlanMaster]:
    async with real_text_models_master() as started:
        yield started


@pytest.mark.parametrize("lang", sorted(BENIGN))
async def test_benign_post_gets_no_harmful_label(master: PlanMaster, lang: str) -> None:
    post = Post(id=f"benign-{lang}", author_id=f"a-{lang}", text=BENIGN[lang])
    results = await master.run_plans(TaskPayload(payload_id=post.id, post=post,
                                                 eligibilities=TEXT_PLANS))
    assert {r.plan for r in results} == TEXT_PLANS
    for result in results:
        assert result.status == TaskStatus.SUCCESS, result.error
        labels = set(result.output.labels)
        assert not labels & FORBIDDEN, (result.plan, labels)
        assert not [x for x in labels if x.endswith(RESTRICTIVE)], (result.plan, labels)
        assert result.output.scores.get(f"lang:{lang}", 0) > 0.5, result.output.scores
    assert len(BENIGN) >= 10


#: Too short for the detector to name a language, but in a script no English word is
#: written in: the English-trained heads must abstain, not read them as spam.
SHORT_NON_LATIN = ["好的，谢谢", "Как дела?", "잘 자요", "ありがとう！", "شكرا لك", "धन्यवाद",
                   "Спасибо!", "你去哪儿了？", "נתראה מחר", "ขอบคุณครับ"]


@pytest.mark.parametrize("text", SHORT_NON_LATIN)
async def test_short_non_latin_post_makes_english_heads_abstain(master: PlanMaster,
                                                                text: str) -> None:
    post = Post(id=f"short-{text}", author_id="a-short", text=text)
    results = await master.run_plans(TaskPayload(payload_id=post.id, post=post,
                                                 eligibilities=TEXT_PLANS))
    for result in results:
        assert result.status == TaskStatus.SUCCESS, result.error
        labels = set(result.output.labels)
        assert not labels & FORBIDDEN, (result.plan, labels)
        assert result.output.reasons["language"].startswith("unknown"), result.output.reasons
    spam = next(r for r in results if r.plan == "spam_comment")
    assert "abstain" in spam.output.labels, spam.output.labels
    assert "not Latin script" in str(spam.output.reasons), spam.output.reasons
