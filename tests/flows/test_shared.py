"""Filters, rate limit, shared-work memoisation and the sink, with model doubles."""

from __future__ import annotations

import time

import msgspec

from grebe import codec
from grebe.core.planmaster import PlanMaster
from grebe.flows import registry, shared
from grebe.flows.services import MediaFacts
from grebe.types import Media, TaskStatus

from .conftest import fake_services, payload


def _by_plan(results):
    return {r.plan: r for r in results}


async def test_shared_work_is_done_once_per_payload() -> None:
    services = fake_services(facts=MediaFacts(ocr_text="menu", nsfw=(0.1,)))
    master = PlanMaster(registry.PLANS, services=services)
    post = payload("a photo of the menu", media=(Media(kind="image", url="https://x/1.jpg"),))
    results = _by_plan(await master.run_plans(post))
    assert all(r.status != TaskStatus.FAILED for r in results.values())
    assert services.media.calls == 1  # ten plans, one hydration
    # Distinct texts embedded: post text, text+OCR (spam/ptos), OCR alone (v5), the
    # summary of text and OCR (post_embedding_with_summary), and the topic descriptions
    # of the banger screen — each once however many plans ask.
    n_topics = len(services.settings.plan("banger_initial_screen").topics)
    assert services.models.embedder.calls == 4 + n_topics


async def test_cross_payload_cache_skips_recomputation() -> None:
    services = fake_services()
    master = PlanMaster(registry.PLANS, services=services)
    await master.run(payload("same words", post_id="1"))
    calls = services.models.embedder.calls
    await master.run(payload("same words", post_id="2"))
    assert services.models.embedder.calls == calls


async def test_sink_upserts_and_publishes_idempotently() -> None:
    services = fake_services()
    master = PlanMaster(registry.PLANS, services=services, )
    post = payload("hello there", eligibilities=frozenset({"spam_comment"}))
    await master.run(post)
    rows = await services.store.get("p1")
    assert [(a.producer, a.version, a.labels) for a in rows] == [
        ("spam_comment", "1", ["not_spam"])]
    topic, key, value = services.producer.published[0]
    assert topic == "annotations" and key == b"p1"
    assert codec.decode_annotation(value).labels == ["not_spam"]
    # Same post again: deduped within the TTL, no second write.
    second = (await master.run_plans(post))[0]
    assert second.status == TaskStatus.SKIPPED
    assert second.skip_reasons["filter"] == shared.SKIP_DUPLICATE
    assert len(services.producer.published) == 1


async def test_retry_of_a_failed_attempt_is_not_deduped() -> None:
    services = fake_services({"defaults": {"dedupe_ttl_s": 600}})
    failing = services.store

    class Broken:
        async def upsert(self, rows):
            raise OSError("disk full")

    services.store = Broken()
    master = PlanMaster(registry.PLANS, services=services)
    post = payload("hello", eligibilities=frozenset({"post_safety"}))
    assert (await master.run_plans(post))[0].status == TaskStatus.FAILED
    services.store = failing
    assert (await master.run_plans(post))[0].status == TaskStatus.SUCCESS


async def test_filters() -> None:
    services = fake_services({
        "post_safety": {"languages": ["en"], "min_engagement": 5},
        "banger_initial_screen": {"min_views": 100},
    })
    master = PlanMaster(registry.PLANS, services=services)
    cases = [
        (payload("hi", eligibilities=frozenset({"post_safety"}), lang="fr", like_count=9),
         shared.SKIP_LANGUAGE),
        (payload("hi", eligibilities=frozenset({"post_safety"}), lang="en", like_count=1),
         shared.SKIP_ENGAGEMENT),
        (payload("hi", eligibilities=frozenset({"banger_initial_screen"}), view_count=10),
         shared.SKIP_ENGAGEMENT),
        (payload("hi", eligibilities=frozenset({"reply_ranking"})), shared.SKIP_POST_TYPE),
    ]
    for post, reason in cases:
        (result,) = await master.run_plans(post)
        assert result.skip_reasons["filter"] == reason, post
        assert not services.producer.published
    expired = msgspec.structs.replace(
        payload("hi", eligibilities=frozenset({"spam_comment"})), deadline=time.time() - 1
    )
    (result,) = await master.run_plans(expired)
    assert result.status == TaskStatus.SKIPPED and result.task_status["sink"] == "skipped"


async def test_language_detector_is_used_when_the_post_has_none() -> None:
    services = fake_services({"post_safety": {"languages": ["de"]}})

    class Detector:
        name = "detector"

        async def classify(self, texts):
            return [{"de": 0.9, "en": 0.1} for _ in texts]

    services.models.language = Detector()
    master = PlanMaster(registry.PLANS, services=services)
    post = payload("Guten Tag", eligibilities=frozenset({"post_safety"}))
    (result,) = await master.run_plans(post)
    assert result.status == TaskStatus.SUCCESS


async def test_rate_limit_skips_when_the_budget_is_spent() -> None:
    services = fake_services({"spam_comment": {"max_qps": 2, "rate_limit_max_wait_s": 0,
                                               "dedupe_ttl_s": 0}})
    master = PlanMaster(registry.PLANS, services=services)
    statuses = []
    for i in range(4):
        (r,) = await master.run_plans(payload(f"post {i}", post_id=str(i),
                                              eligibilities=frozenset({"spam_comment"})))
        statuses.append(r.skip_reasons.get("rate_limit"))
    assert statuses == [None, None, shared.SKIP_RATE_LIMITED, shared.SKIP_RATE_LIMITED]


async def test_rate_limit_waits_for_the_next_slot() -> None:
    services = fake_services()
    limiter = services.limiter
    assert await limiter.acquire("p", 1, 0)
    started = time.monotonic()
    assert await limiter.acquire("p", 1, 2.0)  # waits for the window, does not skip
    assert 0.2 < time.monotonic() - started < 1.6


async def test_a_shared_computation_is_one_asyncio_task_for_every_caller() -> None:
    """The payload memo adopts the cache's computation: one task per computation (there
    were two: a memo task awaiting a cache task), whatever the number of callers."""
    import asyncio

    from grebe.core.memo import PayloadMemo
    from grebe.core.task import PlanOutput, TaskContext

    services = fake_services()
    ctx = TaskContext(payload("x"), "spam_comment", {}, PlanOutput([], {}, {}), PayloadMemo(),
                      services)
    release = asyncio.Event()
    calls = 0

    async def compute() -> str:
        nonlocal calls
        calls += 1
        await release.wait()
        return "value"

    loop = asyncio.get_running_loop()
    made: list[object] = []
    default = loop.get_task_factory()

    def counting(loop: asyncio.AbstractEventLoop, coro: object, **kw: object) -> object:
        made.append(coro)
        return asyncio.Task(coro, loop=loop, **kw)  # type: ignore[arg-type]

    loop.set_task_factory(counting)  # type: ignore[arg-type]
    try:
        callers = [asyncio.ensure_future(shared.shared(ctx, "k", compute)) for _ in range(6)]
        await asyncio.sleep(0)
        release.set()
        assert await asyncio.gather(*callers) == ["value"] * 6
    finally:
        loop.set_task_factory(default)
    assert calls == 1 and len(made) == 6 + 1, made  # the six callers and one computation
    assert await shared.shared(ctx, "k", compute) == "value"  # done: no await machinery
