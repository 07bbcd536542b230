"""Fail closed: media that could not be checked never reads as clean (issue 9).

Six unfetchable URLs used to give `post_safety` the label `safe` with nsfw 0.0 and no
reason. Now every plan that looks at media adds `media_unchecked`, with a reason naming
each item and why, and `post_safety` never says `safe` while any item went unchecked."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from grebe.core.planmaster import PlanMaster
from grebe.errors import MediaError
from grebe.flows import registry, shared
from grebe.flows.models import PipelineHydrator
from grebe.flows.services import MediaFacts
from grebe.flows.settings import FlowSettings
from grebe.inference.fakes import ConstantImageClassifier
from grebe.media.config import MediaConfig, PipelineConfig
from grebe.media.fetch import FetchedMedia, MediaFetcher
from grebe.media.pipeline import MediaPipeline
from grebe.stores.base import MemoryStore
from grebe.types import Media, TaskStatus

from .conftest import fake_models, fake_services, payload

MEDIA_PLANS = ("post_safety", "safety_ptos", "spam_comment", "banger_initial_screen",
               "mm_emb_v5", "mm_emb_v4")
UNFETCHABLE = (
    "http://127.0.0.1:9/a.png",  # loopback
    "http://10.1.2.3/b.jpg",  # private
    "http://169.254.169.254/latest/meta-data/",  # link-local (cloud metadata)
    "ftp://example.com/c.png",  # scheme
    "file:///etc/passwd",  # local files not allowed
    "http://[fec0::1]/d.png",  # IPv6 site-local
)


def _outputs(results: list) -> dict[str, object]:
    failed = {r.plan: r.error for r in results if r.status == TaskStatus.FAILED}
    assert not failed, failed
    return {r.plan: r.output for r in results}


async def _run(master: PlanMaster, urls: tuple[str, ...]) -> dict[str, object]:
    post = payload("a nice day out", media=tuple(Media(kind="image", url=u) for u in urls))
    return _outputs(await master.run_plans(post))


async def test_six_unfetchable_urls_are_media_unchecked_never_safe(tmp_path: Path) -> None:
    config = MediaConfig(pipeline=PipelineConfig(asr=False))
    nsfw = ConstantImageClassifier({"nsfw": 0.0, "sfw": 1.0}, name="fake-nsfw")
    hydrator = PipelineHydrator(MediaPipeline(config, nsfw=nsfw, work_root=tmp_path))
    services = registry.assemble(FlowSettings.from_section(None), models=fake_models(),
                                 store=MemoryStore(), media=hydrator)
    await hydrator.start()
    try:
        out = await _run(PlanMaster(registry.PLANS, services=services), UNFETCHABLE)
    finally:
        await hydrator.stop()
    safety = out["post_safety"]
    assert safety.labels == [shared.LABEL_MEDIA_UNCHECKED]
    reason = safety.reasons[shared.LABEL_MEDIA_UNCHECKED]
    for url, why in zip(UNFETCHABLE, ("loopback", "private", "link-local", "scheme",
                                      "local files", "site-local"), strict=True):
        assert url in reason and why in reason.split(url, 1)[1].split(";", 1)[0], (url, reason)
    assert safety.scores[shared.LABEL_MEDIA_UNCHECKED] == 6.0
    for plan in MEDIA_PLANS:
        assert shared.LABEL_MEDIA_UNCHECKED in out[plan].labels, plan


async def test_one_unchecked_item_among_good_ones_still_blocks_safe() -> None:
    facts = MediaFacts(nsfw=(0.01,), items=2, nsfw_model="fake",
                       unchecked=("https://x/2.mp4: video frames over the cap",))
    master = PlanMaster(registry.PLANS, services=fake_services(facts=facts))
    out = await _run(master, ("https://x/1.jpg", "https://x/2.mp4"))
    assert out["post_safety"].labels == [shared.LABEL_MEDIA_UNCHECKED]
    assert "over the cap" in out["post_safety"].reasons[shared.LABEL_MEDIA_UNCHECKED]
    assert out["banger_initial_screen"].reasons["quality"].count("media 0.00") == 1


async def test_failed_check_and_unchecked_media_are_both_reported() -> None:
    facts = MediaFacts(nsfw=(0.99,), items=2, unchecked=("https://x/2.png: corrupt",))
    master = PlanMaster(registry.PLANS, services=fake_services(facts=facts))
    out = await _run(master, ("https://x/1.jpg", "https://x/2.png"))
    assert out["post_safety"].labels == [shared.LABEL_MEDIA_UNCHECKED, "nsfw"]


async def test_checked_media_is_still_safe() -> None:
    facts = MediaFacts(nsfw=(0.01,), items=1)
    master = PlanMaster(registry.PLANS, services=fake_services(facts=facts))
    out = await _run(master, ("https://x/1.jpg",))
    assert out["post_safety"].labels == ["safe"]
    assert all(shared.LABEL_MEDIA_UNCHECKED not in out[p].labels for p in MEDIA_PLANS)


async def test_media_without_a_media_service_is_unchecked() -> None:
    services = fake_services()
    services.media = None
    out = await _run(PlanMaster(registry.PLANS, services=services), ("https://x/1.jpg",))
    assert out["post_safety"].labels == [shared.LABEL_MEDIA_UNCHECKED]
    assert shared.NO_MEDIA_SERVICE in out["post_safety"].reasons[shared.LABEL_MEDIA_UNCHECKED]


async def test_reason_names_the_first_items_and_counts_the_rest() -> None:
    facts = MediaFacts(unchecked=tuple(f"https://x/{i}.png: refused" for i in range(20)))
    master = PlanMaster(registry.PLANS, services=fake_services(facts=facts))
    out = await _run(master, ("https://x/0.png",))
    reason = out["post_safety"].reasons[shared.LABEL_MEDIA_UNCHECKED]
    assert "https://x/7.png" in reason and "https://x/8.png" not in reason
    assert reason.endswith("... and 12 more")


class SlowFetcher(MediaFetcher):
    """A fetch that takes a while and counts how many were started (a unit-test double:
    what matters here is whether jobs start after the caller gave up)."""

    def __init__(self) -> None:
        super().__init__()
        self.started = 0

    async def fetch(self, url: str, dest_dir: Path) -> FetchedMedia:
        self.started += 1
        await asyncio.sleep(0.5)
        raise MediaError(f"slow fetch of {url} gave nothing")


async def test_a_payload_given_up_cancels_its_media_jobs(tmp_path: Path) -> None:
    config = MediaConfig(pipeline=PipelineConfig(asr=False, max_items_per_post=64))
    fetcher = SlowFetcher()
    pipeline = MediaPipeline(config, fetcher=fetcher, work_root=tmp_path)
    hydrator = PipelineHydrator(pipeline)
    services = registry.assemble(FlowSettings.from_section(None), models=fake_models(),
                                 store=MemoryStore(), media=hydrator)
    await hydrator.start()
    try:
        post = payload("forty photos", media=tuple(
            Media(kind="image", url=f"https://cdn.example/{i}.png") for i in range(40)))
        run = asyncio.create_task(PlanMaster(registry.PLANS, services=services).run_plans(post))
        async with asyncio.timeout(10):
            while fetcher.started < config.pipeline.download_workers:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        run.cancel()  # the engine gives up on the payload (deadline, shutdown)
        with contextlib.suppress(asyncio.CancelledError):
            await run
        async with asyncio.timeout(10):
            while pipeline._jobs:  # noqa: ASYNC110  # the job set has no event
                await asyncio.sleep(0.01)
        # 40 fetches at 4 at a time would take 5 s; only the first round ever started.
        assert fetcher.started == config.pipeline.download_workers
    finally:
        await hydrator.stop()
