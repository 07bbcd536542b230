"""Only the models the plans call are loaded, once: with the trained heads, a text post
runs every flow without the pre-heads models (profanity, HateSonar, e-mail spam head) or
the media models (NSFW, OCR, Whisper) ever being built; a photo loads NSFW and OCR on
first use; a media model that cannot load leaves the post unchecked, never safe. Real
models (MiniLM, heads, py3langid, Open-NSFW, Tesseract) on a packaged photo."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from grebe.commands.demo_set import skimage_dir
from grebe.config import load_config
from grebe.core.bundle import PlanBundle
from grebe.core.planmaster import PlanMaster
from grebe.flows import catalog, registry
from grebe.flows.models import FlowModels, build_media, build_models, heads_available
from grebe.flows.settings import FlowSettings
from grebe.inference.lazy import LazyService
from grebe.stores.base import MemoryStore
from grebe.types import Media, Post, TaskPayload, TaskStatus

pytestmark = [pytest.mark.slow]

ALL = catalog.eligibilities()


def lazy_loads(models: FlowModels) -> dict[str, int]:
    """Loads per lazy model (a model built eagerly would not be a LazyService at all)."""
    parts = {"offensive": models.offensive, "hate": models.hate.inner,  # type: ignore[attr-defined]
             "spam_head": models.spam_head, "nsfw": models.nsfw, "ocr": models.ocr,
             "transcriber": models.transcriber}
    assert all(isinstance(p, LazyService) for p in parts.values()), parts
    return {name: p.loads for name, p in parts.items()}


async def run_post(master: PlanMaster, n: int, text: str, media: tuple[Media, ...] = ()
                   ) -> dict[str, Any]:
    post = Post(id=f"load-{n}", author_id="a", text=text, media=media, created_at=time.time())
    results = {r.plan: r for r in await master.run_plans(
        TaskPayload(payload_id=post.id, post=post, eligibilities=ALL))}
    failed = {p: r.error for p, r in results.items() if r.status == TaskStatus.FAILED}
    assert not failed, failed
    return results


async def started(section: dict[str, Any]) -> tuple[FlowModels, PlanBundle]:
    config = load_config(inference=section, media={"fetch": {
        "allow_files": True, "file_roots": [str(skimage_dir())]}})
    settings = FlowSettings.from_section({"defaults": {"dedupe_ttl_s": 0}})
    models = build_models(config, settings)
    media = build_media(config, models)
    services = registry.assemble(settings, models=models, store=MemoryStore(), media=media)
    bundle = PlanBundle(plans=registry.PLANS, services=services,
                        components=registry.lifecycles([*models.components(), media]))
    await bundle.start()
    return models, bundle


@pytest_asyncio.fixture
async def default_models() -> AsyncIterator[tuple[FlowModels, PlanBundle]]:
    assert heads_available()
    models, bundle = await started({})
    try:
        yield models, bundle
    finally:
        await bundle.stop()


async def test_text_posts_never_load_fallback_or_media_models(default_models) -> None:
    models, bundle = default_models
    none = dict.fromkeys(("offensive", "hate", "spam_head", "nsfw", "ocr", "transcriber"), 0)
    assert lazy_loads(models) == none  # started: the engine is ready without them
    master = bundle.master()
    out = await run_post(master, 1, "You are a stupid fucking idiot, shut up")
    assert "offensive" in out["post_safety"].output.labels  # judged by the heads
    await run_post(master, 2, "CONGRATULATIONS you won a FREE gift card, click now")
    assert lazy_loads(models) == none

    photo = (Media(kind="image", url=(skimage_dir() / "coffee.png").as_uri()),)
    out = await run_post(master, 3, "Morning coffee at the cafe", photo)
    await run_post(master, 4, "More coffee", photo)
    assert out["post_safety"].output.labels == ["safe"]
    assert out["post_safety"].output.model_versions["nsfw"] == "open-nsfw"
    # The photo loaded NSFW and OCR, once for both posts; still no fallback, no Whisper.
    assert lazy_loads(models) == {**none, "nsfw": 1, "ocr": 1}


async def test_a_media_model_that_cannot_load_leaves_the_post_unchecked(tmp_path) -> None:
    _, bundle = await started({"nsfw": {"model_path": str(tmp_path / "missing.onnx")}})
    try:  # the engine still starts: text posts do not need the NSFW model
        photo = (Media(kind="image", url=(skimage_dir() / "coffee.png").as_uri()),)
        out = await run_post(bundle.master(), 1, "Morning coffee at the cafe", photo)
        safety = out["post_safety"].output
        assert "safe" not in safety.labels and "media_unchecked" in safety.labels
        assert "failed to load" in safety.reasons["media_unchecked"]
    finally:
        await bundle.stop()
