"""Every flow on clear real cases with the real local models (MiniLM, the trained spam
head, profanity and HateSonar, Open-NSFW, Tesseract, Whisper tiny.en) and the real media
pipeline on packaged photos and a video with real speech. Slow: models load once per
module, then each case takes a second or two."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from grebe.commands.demo_set import make_speech_video, skimage_dir, speech_wav
from grebe.config import load_config
from grebe.core.planmaster import PlanMaster
from grebe.flows import catalog, registry
from grebe.flows.models import build_media, build_models
from grebe.flows.settings import FlowSettings
from grebe.stores.base import MemoryStore
from grebe.types import Media, Post, TaskPayload, TaskStatus, UserContext

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

ALL = catalog.eligibilities()
SPAM = ("CONGRATULATIONS!!! You have been selected to receive a FREE $1000 gift card. "
        "Click here http://bit.ly/claim-now to claim your prize, limited offer, act now!")
BENIGN = "Had a lovely walk in the park with my kids this afternoon, the leaves are turning."
OFFENSIVE = "You are a stupid fucking idiot and everyone here hates you, shut up"


class Flows:
    def __init__(self, master: PlanMaster, store: MemoryStore, media_dir: Path) -> None:
        self.master, self.store, self.media_dir = master, store, media_dir
        self._n = 0
        self.last_id = ""

    async def run(self, text: str, *, media: tuple[Media, ...] = (), parent: str | None = None,
                  author: str = "author") -> dict[str, object]:
        self._n += 1
        parent_post = Post(id=f"parent-{self._n}", author_id="p", text=parent) if parent else None
        post = Post(id=f"real-{self._n}", author_id=author, text=text, media=media,
                    reply_to_post_id=parent_post.id if parent_post else None,
                    created_at=time.time())
        payload = TaskPayload(payload_id=post.id, post=post, eligibilities=ALL,
                              context=UserContext(parent=parent_post))
        self.last_id = post.id
        results = {r.plan: r for r in await self.master.run_plans(payload)}
        failed = {p: r.error for p, r in results.items() if r.status == TaskStatus.FAILED}
        assert not failed, failed
        return results


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def flows(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Flows]:
    media_dir = tmp_path_factory.mktemp("media")
    config = load_config(media={"fetch": {"allow_files": True, "file_roots": [
        str(skimage_dir()), str(media_dir)]}})
    settings = FlowSettings.from_section({"defaults": {"dedupe_ttl_s": 0}})
    models = build_models(config, settings)
    media = build_media(config, models)
    store = MemoryStore()
    services = registry.assemble(settings, models=models, store=store, media=media)
    components = [*models.components(), media]
    for component in components:
        await component.start()
    try:
        yield Flows(PlanMaster(registry.PLANS, services=services), store, media_dir)
    finally:
        for component in reversed(components):
            await component.stop()


async def test_obvious_spam(flows: Flows) -> None:
    out = await flows.run(SPAM)
    assert out["spam_comment"].output.labels == ["spam"]
    assert out["spam_comment"].output.reasons["spam"].startswith("head spam")
    assert "spam" in out["safety_ptos"].output.labels
    assert "banger_candidate" not in out["banger_initial_screen"].output.labels


async def test_benign_text(flows: Flows) -> None:
    out = await flows.run(BENIGN)
    assert out["spam_comment"].output.labels == ["not_spam"]
    assert out["post_safety"].output.labels == ["safe"]
    assert out["safety_ptos"].output.labels == []
    assert len(out["post_embedding_with_summary"].output.embedding) == 384


async def test_offensive_text(flows: Flows) -> None:
    out = await flows.run(OFFENSIVE)
    assert "offensive" in out["post_safety"].output.labels
    assert "harassment" in out["safety_ptos"].output.labels
    assert "target=individual" in out["safety_ptos"].output.reasons["ptos.harassment"]
    assert "insult" in out["post_safety"].output.labels  # aimed at a person


async def test_safe_photo(flows: Flows) -> None:
    url = (skimage_dir() / "coffee.png").as_uri()
    out = await flows.run("Morning coffee at the cafe", media=(Media(kind="image", url=url),))
    safety = out["post_safety"].output
    assert safety.labels == ["safe"] and safety.scores["nsfw"] < 0.2
    assert safety.model_versions["nsfw"] == "open-nsfw"


async def test_photo_text_is_read_and_embedded(flows: Flows) -> None:
    url = (skimage_dir() / "page.png").as_uri()
    out = await flows.run("notes", media=(Media(kind="image", url=url),))
    assert out["mm_emb_v5"].output.reasons["parts"] == "text,ocr"
    assert out["mm_emb_v4"].output.reasons["parts"] == "text,ocr"


async def test_video_with_speech_has_its_transcript_in_the_annotation(flows: Flows) -> None:
    video = make_speech_video(skimage_dir() / "astronaut.png", speech_wav(),
                              flows.media_dir / "reading.mp4")
    out = await flows.run("listen", media=(Media(kind="video", url=video.as_uri()),))
    v5 = out["mm_emb_v5"].output
    assert "best of times" in v5.transcript.lower() and "worst of times" in v5.transcript.lower()
    assert out["post_safety"].output.labels == ["safe"]  # frames scored, speech heard
    assert v5.reasons["parts"] == "text,transcript"
    rows = {a.producer: a for a in await flows.store.get(flows.last_id)}
    assert "worst of times" in rows["mm_emb_v5"].transcript.lower()


async def test_reply_ranking_prefers_the_relevant_reply(flows: Flows) -> None:
    parent = "Best flat white in town is at the corner cafe on Main Street"
    relevant = await flows.run("Their flat white is great, the cafe on Main Street is my "
                               "favourite coffee place too", parent=parent)
    unrelated = await flows.run("The quarterly tax filing deadline moved to next Friday",
                                parent=parent)
    good = relevant["reply_ranking"].output.scores
    bad = unrelated["reply_ranking"].output.scores
    assert good["relevance"] > bad["relevance"] + 0.2
    assert good["reply_score"] >= 2 and bad["reply_score"] <= 1


async def test_summary_keeps_the_central_sentences(flows: Flows) -> None:
    text = ("The city council approved the new bike lanes on Tuesday. "
            "The lanes will connect the university to downtown. "
            "My cat knocked a glass off the table this morning. "
            "Council members said the bike lanes should open next spring.")
    out = await flows.run(text)
    summary = out["post_embedding_with_summary"].output.reasons["summary"]
    assert "cat" not in summary and "bike lanes" in summary


async def test_banger_topics(flows: Flows) -> None:
    out = await flows.run("My kitten fell asleep on the dog again, pets are the best #cats")
    labels = out["banger_initial_screen"].output.labels
    assert "topic:animals" in labels and "topic:cats" in labels
