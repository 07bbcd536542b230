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


LONG = ("Football is back. The team won the final. The striker scored twice. "
        "Fans sang all night. My cat ignored all of it.")


async def test_a_long_post_costs_one_encoder_call_across_plans() -> None:
    # Before: the post (spam, v5), then its five sentences, then the summary: 3 calls.
    services = fake_services({"post_embedding_with_summary": {"summary_sentences": 2}})
    results = await PlanMaster(registry.PLANS, services=services).run_plans(payload(
        LONG, eligibilities=frozenset({"post_embedding_with_summary", "mm_emb_v5",
                                       "spam_comment"})))
    assert all(r.status == TaskStatus.SUCCESS for r in results), [r.error for r in results]
    assert services.models.embedder.calls == 1


async def test_real_minilm_encodes_a_long_post_once_for_summary_and_embedding() -> None:
    from grebe.inference.minilm import MiniLMEmbedder

    services = fake_services({"post_embedding_with_summary": {"summary_sentences": 2}})
    embedder = MiniLMEmbedder(intra_op_threads=1)
    services.models.embedder = embedder
    await embedder.start()
    try:
        results = await PlanMaster(registry.PLANS, services=services).run_plans(payload(
            LONG, eligibilities=frozenset({"post_embedding_with_summary", "mm_emb_v5"})))
        assert all(r.status == TaskStatus.SUCCESS for r in results), [r.error for r in results]
        assert embedder.batcher is not None and embedder.batcher.items == 1  # was 1 + 5 + 1
        by_plan = {r.plan: r.output for r in results}
        summary = by_plan["post_embedding_with_summary"]
        assert summary.reasons["summary"] != LONG
        # The summary's vector: its sentences as read in the post (0.74 to them alone here;
        # docs/benchmarks.md has the spread over real tweets).
        alone = (await embedder.embed([summary.reasons["summary"]]))[0]
        assert float(np.dot(summary.embedding, alone)) > 0.6
        assert not np.allclose(summary.embedding, by_plan["mm_emb_v5"].embedding)
    finally:
        await embedder.stop()
