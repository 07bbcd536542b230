"""The flows on the trained-heads interface (a TextHeads double that reads keywords):
one embedding feeds every head, target-aware toxicity, thresholds as policy, language
abstention per head, and PTOS word lists that need a second signal."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from grebe.core.planmaster import PlanMaster
from grebe.flows import judge, registry
from grebe.flows.services import FlowServices
from grebe.types import TaskStatus

from . import doubles
from .conftest import fake_services, payload
from .doubles import KeywordHeads, RememberingEmbedder

TEXT_PLANS = frozenset({"spam_comment", "post_safety", "safety_ptos"})


class Detector:
    name = "detector-double"

    def __init__(self, lang: str) -> None:
        self.lang = lang

    async def classify(self, texts: Sequence[str]) -> list[dict[str, float]]:
        return [{self.lang: 0.97} for _ in texts]


def heads_services(plans: dict[str, Any] | None = None, lang: str = "en") -> FlowServices:
    services = fake_services({"defaults": {"dedupe_ttl_s": 0}, **(plans or {})})
    services.models.embedder = RememberingEmbedder()
    services.models.heads = KeywordHeads(services.models.embedder)
    services.models.language = Detector(lang)
    return services


async def run(services: FlowServices, text: str) -> dict[str, Any]:
    results = await PlanMaster(registry.PLANS, services=services).run_plans(
        payload(text, eligibilities=TEXT_PLANS))
    assert all(r.status == TaskStatus.SUCCESS for r in results), [r.error for r in results]
    return {r.plan: r.output for r in results}


def actions(ptos: Any) -> list[str]:
    return [label for label in ptos.labels if ":" in label]


async def test_one_embedding_feeds_every_head_and_plan() -> None:
    services = heads_services()
    out = await run(services, "buy cheap pills, click the free offer now")
    assert services.models.embedder.calls == 1 and services.models.heads.calls == 1
    assert out["spam_comment"].labels == ["spam"]
    assert out["spam_comment"].reasons["spam"].startswith("head spam 0.95 >= 0.50 (validation")
    assert out["spam_comment"].model_versions["heads"] == "heads-test-1"
    assert "spam" in out["safety_ptos"].labels


async def test_profanity_in_joy_at_a_mention_is_not_harassment() -> None:
    out = await run(heads_services(), "@x Ha, that's fucking awesome! Great song! :D")
    assert out["post_safety"].labels == ["offensive"]
    assert "harassment" not in out["safety_ptos"].labels and actions(out["safety_ptos"]) == []
    assert "not aimed at a person" in out["safety_ptos"].reasons["ptos.harassment"]


async def test_insult_aimed_at_a_person() -> None:
    out = await run(heads_services(), "@x you are a stupid idiot")
    assert set(out["post_safety"].labels) == {"insult", "offensive"}
    assert "target head target=individual" in out["post_safety"].reasons["insult"]
    assert "harassment" in out["safety_ptos"].labels
    assert actions(out["safety_ptos"]) == ["harassment:limit_reach"]


async def test_an_insult_word_said_to_someone_is_an_insult_whatever_the_target_head() -> None:
    # "you" and "those people" split the double's target head: individual 0.47 < 0.5
    told = await run(heads_services(), "you stupid idiot, like those people")
    assert "insult" in told["post_safety"].labels
    assert "said to someone" in told["post_safety"].reasons["insult"]
    # an insult word about others, said to no one, still needs the target head
    about = await run(heads_services(), "those people are stupid idiots")
    assert "insult" not in about["post_safety"].labels


async def test_an_insult_word_said_of_oneself_insults_no_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the double's target head reads "i'm" as aimed at a person, as the real one often does
    monkeypatch.setattr(doubles, "INDIVIDUAL_WORDS", (*doubles.INDIVIDUAL_WORDS, "i'm", "he"))
    own = await run(heads_services(), "@x I'm such a stupid idiot sometimes")
    assert "insult" not in own["post_safety"].labels
    assert own["post_safety"].labels == ["offensive"]
    assert "not aimed at a person" in own["safety_ptos"].reasons["ptos.harassment"]
    assert actions(own["safety_ptos"]) == []
    other = await run(heads_services(), "@x he is such a stupid idiot sometimes")
    assert "insult" in other["post_safety"].labels


@pytest.mark.parametrize("text", ["I hate Mondays", "I. Hate. Burpees.",
                                  "that workout killed me"])
async def test_harmless_hate_and_kill(text: str) -> None:
    out = await run(heads_services(), text)
    assert out["post_safety"].labels == ["safe"], out["post_safety"].reasons
    assert out["safety_ptos"].labels == []


async def test_threat_and_identity_hate() -> None:
    threat = await run(heads_services(), "I will find where you live and make you pay")
    assert "threat" in threat["post_safety"].labels
    assert "violence" in threat["safety_ptos"].labels
    hate = await run(heads_services(), "those people are vermin and should leave")
    assert "hate" in hate["post_safety"].labels and "hate" in hate["safety_ptos"].labels


@pytest.mark.parametrize(("text", "category"), [
    ("i have a shoot saturday", "violence"),
    ("migraine, you make me want to die.", "self_harm"),
    ("washing my hair and it keeps falling out. Xxx", "sexual"),
])
@pytest.mark.parametrize("with_heads", [True, False])
async def test_one_word_list_hit_is_not_a_category(text: str, category: str,
                                                   with_heads: bool) -> None:
    services = heads_services() if with_heads else fake_services({"defaults": {
        "dedupe_ttl_s": 0}})
    out = await run(services, text)
    assert category not in out["safety_ptos"].labels
    assert actions(out["safety_ptos"]) == []
    assert "no second signal" in out["safety_ptos"].reasons[f"ptos.{category}"]


async def test_word_list_hit_with_a_second_signal_matches() -> None:
    out = await run(heads_services(), "you stupid idiot, I will stab you")
    assert "violence" in out["safety_ptos"].labels
    assert "and head offensive" in out["safety_ptos"].reasons["ptos.violence"]


async def test_policy_threshold_overrides_the_validation_threshold() -> None:
    services = heads_services({"spam_comment": {"head_thresholds": {"spam.spam": 0.99}}})
    out = await run(services, "buy cheap pills, click the free offer now")
    assert out["spam_comment"].labels == ["not_spam"]
    assert out["spam_comment"].reasons["spam"] == "head spam 0.95 < 0.99 (policy)"
    annotations = await services.store.get("p1")
    assert all("+config." in a.policy_version for a in annotations)


async def test_head_outside_its_languages_abstains() -> None:
    # keywords the double fires on, in a post whose other words are not English (a post
    # of English words only is English whatever the detector says: grebe.flows.language)
    out = await run(heads_services(lang="ja"), "buy cheap pills, click the free offer idiot "
                    "今日は友達とラーメンを食べました 美味しかった 本当に 楽しい 一日 でした")
    assert out["spam_comment"].labels == ["abstain"]
    assert out["spam_comment"].reasons["spam"].startswith("unsupported_language: ja 0.97")
    assert out["post_safety"].labels == ["abstain"]
    assert out["safety_ptos"].labels == ["abstain"] and actions(out["safety_ptos"]) == []


async def test_unknown_language_caps_restrictive_actions() -> None:
    services = heads_services()
    services.models.language = None  # no detector: every language is unknown
    out = await run(services, "@x you are a stupid idiot")
    assert actions(out["safety_ptos"]) == ["harassment:label"]
    assert "limit_reach capped to label" in out["safety_ptos"].reasons["policy.harassment"]


async def test_banger_and_reply_penalties_read_the_heads() -> None:
    services = heads_services()
    post = payload("you stupid idiot, buy cheap pills here", parent="What do you think?",
                   eligibilities=frozenset({"banger_initial_screen", "reply_ranking"}),
                   view_count=1000, like_count=50)
    results = {r.plan: r.output for r in
               await PlanMaster(registry.PLANS, services=services).run_plans(post)}
    assert "spam 0.95, offensive 0.90" in results["banger_initial_screen"].reasons["quality"]
    assert results["reply_ranking"].labels == ["reply_score:0"]
    assert results["reply_ranking"].model_versions["heads"] == "heads-test-1"
    assert "spam_head" not in results["reply_ranking"].model_versions


async def test_a_head_without_a_threshold_needs_one_in_the_policy() -> None:
    services = heads_services()
    services.models.heads.heads["threat"].thresholds.clear()
    results = await PlanMaster(registry.PLANS, services=services).run_plans(
        payload("hello there friends", eligibilities=frozenset({"post_safety"})))
    assert "set head_thresholds['threat.threat']" in str(results[0].error)
    services.settings.plan("post_safety").head_thresholds["threat.threat"] = 0.8
    (ok,) = await PlanMaster(registry.PLANS, services=services).run_plans(
        payload("hello there friends", post_id="p2", eligibilities=frozenset({"post_safety"})))
    assert ok.status == TaskStatus.SUCCESS


async def test_hate_needs_a_group_target() -> None:
    # The hate head fires, but the target head reads the post as aimed at a person:
    # that is not hate against an identity group.
    out = await run(heads_services(), "you are vermin")
    assert "hate" not in out["post_safety"].labels
    assert "hate" not in out["safety_ptos"].labels
    assert "target group+other" in out["safety_ptos"].reasons["ptos.hate"]


async def test_heads_path_is_never_safe_with_unchecked_media() -> None:
    from grebe.flows.services import MediaFacts
    from grebe.types import Media

    services = heads_services()
    services.media.facts = MediaFacts(unchecked=("https://x/1.jpg: fetch failed",))
    results = await PlanMaster(registry.PLANS, services=services).run_plans(payload(
        "a lovely day at the beach", eligibilities=frozenset({"post_safety"}),
        media=(Media(kind="image", url="https://x/1.jpg"),)))
    assert results[0].output.labels == ["media_unchecked"]


@pytest.mark.parametrize("text", [
    "calling immigrants vermin is wrong",
    "people who say immigrants are vermin, that is hateful",
    "stop calling immigrants vermin",
])
async def test_counter_speech_that_denounces_hate_is_not_hate(text: str) -> None:
    out = await run(heads_services(), text)
    assert "hate" not in out["post_safety"].labels, out["post_safety"].reasons
    assert "hate" not in out["safety_ptos"].labels
    assert "counter-speech: denounces hate" in out["safety_ptos"].reasons["ptos.hate"]


async def test_denied_hostility_is_not_hate() -> None:
    # The double scores "vermin" 0.95, and 0.75 under a "not" (>= hate.hate 0.69)
    out = await run(heads_services(), "immigrants are not vermin")
    assert "hate" not in out["post_safety"].labels
    assert "counter-speech: denies every hostile word it says" in (
        out["safety_ptos"].reasons["ptos.hate"])


async def test_negated_hate_is_not_hate() -> None:
    # No hostile word is said, and the post's "not" negates a statement the hate head
    # scores higher (0.95 without it), so it is counter-speech.
    out = await run(heads_services(), "immigrants are not locusts")
    assert "hate" not in out["post_safety"].labels
    assert "negates a statement the hate head scores higher (0.95 >= 0.75 + 0.1" in (
        out["safety_ptos"].reasons["ptos.hate"])


@pytest.mark.parametrize("text", [
    "immigrants, vermin. not them",  # "vermin" is said: the "not" denies something else
    "those locusts won't change, let's eradicate them",
])
async def test_a_negation_beside_a_hostile_word_said_is_no_denial(text: str) -> None:
    out = await run(heads_services({"post_safety": {"head_thresholds": {
        "hate.hate": 0.7, "hate.hostile": 0.7}}}), text)
    assert "hate" in out["post_safety"].labels, out["post_safety"].reasons
    assert "negates" not in out["safety_ptos"].reasons["ptos.hate"]


@pytest.mark.parametrize(("text", "denied"), [
    ("immigrants are not the problem", "immigrants are the problem"),
    ("I don't hate gay people", "I do hate gay people"),
    ("women can't be trusted", "women can be trusted"),
    ("gay people are disgusting", None),
])
def test_denied_statement_drops_the_negation(text: str, denied: str | None) -> None:
    assert judge.denied_statement(text) == denied


async def test_insult_may_use_a_lower_offensive_bar_than_the_offensive_label() -> None:
    # Two signals (offensive words, aimed at a person) may warrant a lower bar than the
    # offensive label's one signal: the policy sets them apart.
    services = heads_services({"post_safety": {"head_thresholds": {
        "offensive.offensive": 0.95, "insult.offensive": 0.6}}})
    out = await run(services, "@x you are a stupid idiot")
    assert out["post_safety"].labels == ["insult"]
    assert "head offensive (for insult) 0.90 >= 0.60 (policy)" in (
        out["post_safety"].reasons["insult"])


async def test_hate_has_a_lower_bar_for_a_hostile_word_said_of_a_group_not_denied() -> None:
    services = heads_services({"post_safety": {"head_thresholds": {
        "hate.hate": 0.99, "hate.hostile": 0.7}}})
    said = await run(services, "immigrants are vermin")  # the double: hate 0.95
    assert "hate" in said["post_safety"].labels
    assert "0.95 >= 0.70 (policy) with hostile word 'vermin' about 'immigrants'" in (
        said["post_safety"].reasons["hate"])
    # the lower bar is for hostility about an identity group ("those people" is none)
    unnamed = await run(heads_services({"post_safety": {"head_thresholds": {
        "hate.hate": 0.99, "hate.hostile": 0.7}}}), "those people are vermin")
    assert "hate" not in unnamed["post_safety"].labels
    denied = await run(heads_services({"post_safety": {"head_thresholds": {
        "hate.hate": 0.99, "hate.hostile": 0.7}}}), "immigrants are not vermin")  # 0.75
    assert "hate" not in denied["post_safety"].labels  # 0.75 clears 0.70, but "not vermin"
    assert denied["post_safety"].scores["hate"] == 0.75


async def test_posts_resumed_together_share_one_heads_call() -> None:
    services = heads_services()
    master = PlanMaster(registry.PLANS, services=services)
    texts = [f"post number {i} about the weather" for i in range(8)]
    results = await asyncio.gather(*(master.run_plans(payload(
        t, eligibilities=TEXT_PLANS, post_id=f"p{i}")) for i, t in enumerate(texts)))
    assert all(r.status == TaskStatus.SUCCESS for rs in results for r in rs)
    assert services.models.heads.calls == 1  # one call per post before
    assert services.head_turns.items == 8


@pytest.mark.parametrize("text", [
    "Comparing refugees to rats is a disgusting thing to do",
    "Your hatred of Jews needs to stop",
    "I never said women are stupid",
    "It is sad to see people wish death on immigrants",
    "Posting that gay men are diseased will get you banned here",
    "There should be consequences for threatening Muslims",
    "Do you hear how racist you sound?",
])
def test_counter_speech_judges_the_speech_act(text: str) -> None:
    assert judge.DENOUNCING.search(text), text


@pytest.mark.parametrize("text", [
    "Muslims are disgusting",  # said of people, "disgusting" is hate
    "That's disgusting, immigrants everywhere",
    "Immigrants are a horrible plague",
    "Their hatred for us will never stop, so we must strike first",
])
def test_hate_is_not_read_as_judging_speech(text: str) -> None:
    assert not judge.DENOUNCING.search(text), text
