"""Language detection, its record in every annotation, and abstention outside the text
models' languages (with a detector double; the real py3langid runs in
test_languages_real.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from grebe.core.planmaster import PlanMaster
from grebe.flows import registry
from grebe.flows.services import FlowServices

from .conftest import fake_services, payload

SPAMMY = "buy cheap pills now click here free money offer, buy cheap pills now"
SPANISH = ("mañana vamos todos juntos a la playa con mis amigos y después comemos "
           "paella mientras vemos atardecer sobre mar tranquilo durante horas enteras "
           "porque siempre disfrutamos muchísimo nuestras vacaciones juntos aquí")


class Detector:
    """Says whatever language/confidence it was built with."""

    name = "detector-double"

    def __init__(self, scores: dict[str, float]) -> None:
        self.scores = scores

    async def classify(self, texts: Sequence[str]) -> list[dict[str, float]]:
        return [dict(self.scores) for _ in texts]


def with_detector(scores: dict[str, float], plans: dict | None = None) -> FlowServices:
    services = fake_services(plans)
    services.models.language = Detector(scores)
    return services


async def run(services: FlowServices, text: str, **post) -> dict:
    master = PlanMaster(registry.PLANS, services=services)
    return {r.plan: r for r in await master.run_plans(payload(text, **post))}


async def test_every_annotation_records_the_language() -> None:
    services = with_detector({"de": 0.97, "nl": 0.03})
    await run(services, "Guten Morgen, wie geht es dir heute?")
    annotations = await services.store.get("p1")
    assert annotations and all(a.scores["lang:de"] == 0.97 for a in annotations)
    assert all(a.reasons["language"] == "de 0.97 (detector-double)" for a in annotations)
    assert all(a.model_versions["language"] == "detector-double" for a in annotations)


@pytest.mark.parametrize(("text", "scores", "reason"), [
    ("lol ok", {"en": 0.9}, "unknown: too short (5 letters)"),
    ("this is a long enough english text", {"vo": 0.11, "uz": 0.06},
     "unknown: top guess vo 0.11 < 0.50"),
])
async def test_short_or_unsure_texts_are_unknown(text: str, scores: dict[str, float],
                                                 reason: str) -> None:
    services = with_detector(scores)
    out = await run(services, text)
    spam = out["spam_comment"].output
    assert spam.reasons["language"].startswith(reason)
    assert spam.scores["lang:und"] == max(scores.values())
    assert "abstain" not in spam.labels  # unknown is judged; the policy caps actions


async def test_declared_language_is_trusted() -> None:
    services = with_detector({"es": 0.99})
    out = await run(services, "hello there my good friends", lang="en")
    assert out["spam_comment"].output.reasons["language"] == "en 1.00 (declared)"


async def test_a_post_of_english_words_is_english_whatever_the_detector_guessed() -> None:
    # py3langid reads this as Nigerian Pidgin 0.54: every English head abstained
    text = "I hate how Christmas music starts in October"
    out = await run(with_detector({"pcm": 0.54}), text)
    reason = out["post_safety"].output.reasons["language"]
    assert reason.startswith("en 1.00 (7 of 7 words English; detector-double said pcm 0.54")
    assert out["post_safety"].output.labels == ["safe"]
    assert out["post_safety"].output.scores["lang:en"] == 1.0
    # a Dutch post the detector reads as Dutch stays Dutch (1 of 5 words English)
    dutch = await run(with_detector({"nl": 0.9}), "Goedemorgen allemaal, fijne dag gewenst!")
    assert dutch["post_safety"].output.reasons["language"].startswith("nl 0.90")


async def test_unsupported_language_abstains_everywhere() -> None:
    services = with_detector({"es": 0.95})
    # the doubles' English keywords among Spanish words (a post of English words only is
    # English whatever the detector says: next test)
    out = await run(services, f"{SPAMMY} idiot stupid vermin kill you {SPANISH}")
    spam = out["spam_comment"].output
    assert spam.labels == ["abstain"]
    assert spam.reasons["spam"].startswith("unsupported_language: es 0.95")
    safety = out["post_safety"].output
    assert safety.labels == ["abstain"] and "unsupported_language" in safety.reasons["abstain"]
    ptos = out["safety_ptos"].output
    assert ptos.labels == ["abstain"]
    assert not any(":" in label for label in ptos.labels)
    # the same text in English is judged (the doubles fire on these words)
    english = await run(with_detector({"en": 0.95}), f"{SPAMMY} idiot stupid vermin kill you")
    assert "offensive" in english["post_safety"].output.labels
