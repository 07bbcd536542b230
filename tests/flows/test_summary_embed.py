"""Summary, then embed: the summary covers text, OCR and transcript, and the embedding
is the summary's vector (not the raw text's)."""

from __future__ import annotations

import numpy as np

from grebe.core.planmaster import PlanMaster
from grebe.flows import registry
from grebe.flows.services import MediaFacts
from grebe.types import Media, TaskStatus

from .conftest import fake_services, payload

PLAN = frozenset({"post_embedding_with_summary"})
VIDEO = (Media(kind="video", url="https://v.example/a.mp4"),)


async def test_summary_covers_ocr_and_transcript_and_is_what_gets_embedded() -> None:
    facts = MediaFacts(ocr_text="FLASH SALE 50% OFF ALL SHOES",
                       transcript="the new stadium opens next month for the final", items=1)
    services = fake_services(facts=facts)
    [result] = await PlanMaster(registry.PLANS, services=services).run_plans(
        payload("look at this", eligibilities=PLAN, media=VIDEO))
    assert result.status == TaskStatus.SUCCESS, result.error
    summary = result.output.reasons["summary"]
    assert "FLASH SALE" in summary and "stadium" in summary
    expected = (await services.models.embedder.embed([summary]))[0]
    raw = (await services.models.embedder.embed(["look at this"]))[0]
    assert np.allclose(result.output.embedding, expected)
    assert not np.allclose(result.output.embedding, raw)


async def test_a_long_text_is_summarised_before_embedding() -> None:
    services = fake_services({"post_embedding_with_summary": {"summary_sentences": 2}})
    text = ("Football is back. The team won the final. The striker scored twice. "
            "Fans sang all night. My cat ignored all of it.")
    [result] = await PlanMaster(registry.PLANS, services=services).run_plans(
        payload(text, eligibilities=PLAN))
    summary = result.output.reasons["summary"]
    assert summary != text and len(summary) < len(text)
    expected = (await services.models.embedder.embed([summary]))[0]
    assert np.allclose(result.output.embedding, expected)
