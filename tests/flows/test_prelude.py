"""A text-only post's shared model work is done once before its plans start
(grebe.flows.prelude), for the plans that would reach their models, and the plans'
results are those they give without it."""

from __future__ import annotations

from typing import Any

from grebe.core.memo import PayloadMemo
from grebe.core.planmaster import PlanMaster
from grebe.flows import registry
from grebe.flows.prelude import warm
from grebe.flows.services import FlowServices
from grebe.types import Media, TaskStatus

from .conftest import payload
from .test_heads_flows import heads_services

DEFAULT_SIX = frozenset({"spam_comment", "post_safety", "safety_ptos", "banger_initial_screen",
                         "post_embedding_with_summary", "mm_emb_v5"})
TEXTS = [
    "buy cheap pills, click the free offer now",
    "@x Ha, that's fucking awesome! Great song! :D",
    "I will find you and hurt you. Then we talk. Then you leave town.",
    "Lovely morning at the lake with the kids",
]


def outputs(results: list[Any]) -> dict[str, Any]:
    assert all(r.status == TaskStatus.SUCCESS for r in results), [r.error for r in results]
    return {r.plan: (sorted(r.output.labels), r.output.scores, r.output.reasons,
                     r.output.embedding, r.output.model_versions) for r in results}


async def run_all(services: FlowServices, text: str, **post: Any) -> dict[str, Any]:
    master = PlanMaster(registry.PLANS, services=services)
    return outputs(await master.run_plans(payload(text, eligibilities=DEFAULT_SIX, **post)))


async def test_the_plans_give_the_same_results_with_and_without_the_prelude() -> None:
    for text in TEXTS:
        without = heads_services()
        without.prelude = None  # type: ignore[assignment,method-assign]  # no hook
        assert PlanMaster(registry.PLANS, services=without).prelude is None
        assert await run_all(heads_services(), text) == await run_all(without, text), text


async def test_the_prelude_encodes_and_judges_the_text_before_any_plan() -> None:
    services = heads_services()
    memo = PayloadMemo()
    plans = PlanMaster(registry.PLANS, services=services).eligible(
        payload(TEXTS[0], eligibilities=DEFAULT_SIX))
    await warm(services, payload(TEXTS[0], eligibilities=DEFAULT_SIX), plans, memo)
    assert services.models.embedder.calls == 1 and services.models.heads.calls == 1
    assert any(key.startswith("verdicts:") for key in memo._entries)
    assert any(key.startswith("summary:") for key in memo._entries)
    assert not memo.has_pending


async def warmed(services: FlowServices, **post: Any) -> PayloadMemo:
    memo = PayloadMemo()
    job = payload(TEXTS[0], eligibilities=frozenset({"spam_comment"}), **post)
    await warm(services, job, PlanMaster(registry.PLANS, services=services).eligible(job), memo)
    return memo


async def test_nothing_is_spent_ahead_of_a_rate_limit() -> None:
    services = heads_services({"spam_comment": {"max_qps": 5}})
    assert len(await warmed(services)) == 0 and services.models.embedder.calls == 0


async def test_nothing_is_spent_on_a_post_the_filters_skip() -> None:
    services = heads_services({"spam_comment": {"min_engagement": 10}})
    assert len(await warmed(services)) == 0
    services = heads_services({"spam_comment": {"languages": ["de"]}})  # the post is English
    memo = await warmed(services)
    assert not any(key.startswith(("emb:", "verdicts:")) for key in memo._entries)
    assert services.models.embedder.calls == 0


async def test_a_post_with_media_has_no_prelude() -> None:
    services = heads_services()
    memo = await warmed(services, media=(Media(kind="image", url="https://example.com/a.jpg"),))
    assert len(memo) == 0


async def test_the_language_guess_and_the_encoder_pass_are_queued_together() -> None:
    """Spam's prelude waits for the language first, safety's for the encoder first: both
    are started before either is awaited, so a post waits for the slower, not the sum."""
    import asyncio

    from .test_heads_flows import Detector

    class HeldDetector(Detector):
        def __init__(self) -> None:
            super().__init__("en")
            self.release = asyncio.Event()

        async def classify(self, texts: Any) -> list[dict[str, float]]:
            await self.release.wait()
            return await super().classify(texts)

    services = heads_services()
    detector = services.models.language = HeldDetector()
    job = payload(TEXTS[0], eligibilities=DEFAULT_SIX)
    plans = PlanMaster(registry.PLANS, services=services).eligible(job)
    warming = asyncio.create_task(warm(services, job, plans, PayloadMemo()))
    for _ in range(20):
        await asyncio.sleep(0)
    assert services.models.embedder.calls == 1 and not warming.done()
    detector.release.set()
    await warming
