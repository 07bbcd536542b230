"""The staged pipeline end to end on real files, with injected (fake) models."""

from __future__ import annotations

import asyncio
import io
import ipaddress
from pathlib import Path

import pytest
from PIL import Image
from prometheus_client import CollectorRegistry

from grebe.inference.fakes import ConstantImageClassifier, FixedOCR, FixedTranscriber
from grebe.media.asr import ASRProcessor
from grebe.media.config import FetchConfig, MediaConfig, PipelineConfig, VideoConfig
from grebe.media.fetch import MediaFetcher
from grebe.media.metrics import MediaMetrics
from grebe.media.pipeline import MediaPipeline
from grebe.types import Media, Post


def _recompressed(photo: Path, out: Path) -> Path:
    image = Image.open(photo).convert("RGB")
    image = image.resize((300, 300))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=45)
    out.write_bytes(buffer.getvalue())
    return out


def read_bytes(path: Path) -> bytes:
    return path.read_bytes()


def _files(path: Path) -> list[Path]:
    return list(path.iterdir())


@pytest.fixture
def corpus(tmp_path: Path, photo: Path, silent_clip: Path, corrupt_video: Path,
           bunny: Path) -> dict[str, Path]:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    bomb = inbox / "bomb.png"
    Image.new("1", (8000, 8000)).save(bomb)
    return {
        "photo": photo,
        "copy": _recompressed(photo, inbox / "copy.jpg"),
        "other": photo.parent / "coffee.png",
        "bunny": bunny,
        "silent": silent_clip,
        "distorted": silent_clip.parent / "carphone_distorted.mp4",
        "bomb": bomb,
        "corrupt": corrupt_video,
    }


def _pipeline(roots: list[Path], work: Path, registry: CollectorRegistry | None = None,
              **kw: object) -> MediaPipeline:
    config = MediaConfig(
        fetch=FetchConfig(allow_files=True, file_roots=roots),
        video=VideoConfig(frames=4, frame_max_side=160),
        pipeline=PipelineConfig(download_workers=2, decode_workers=2, classify_workers=2),
    )
    return MediaPipeline(
        config,
        nsfw=ConstantImageClassifier({"nsfw": 0.25, "sfw": 0.75}, name="fake-nsfw"),
        ocr=FixedOCR("SALE 50% OFF"),
        asr=ASRProcessor(config.asr, config.video, transcriber=FixedTranscriber("hello world")),
        metrics=MediaMetrics(registry) if registry is not None else None,
        work_root=work,
        **kw,  # type: ignore[arg-type]
    )


async def test_end_to_end_with_stage_stats(corpus: dict[str, Path], tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    registry = CollectorRegistry()
    roots = [corpus[k].parent for k in ("photo", "bunny", "bomb", "corrupt")]
    pipeline = _pipeline(roots, work, registry)
    await pipeline.start()
    order = ["photo", "other", "bunny", "silent", "bomb", "corrupt", "copy", "distorted"]
    urls = [(f"post-{name}", str(corpus[name])) for name in order]
    urls.append(("post-ssrf", "http://169.254.169.254/latest/meta-data/"))
    seen: list[str] = []
    reports = await pipeline.scan(urls, on_done=lambda r: seen.append(r.post_id))
    by = {r.post_id.removeprefix("post-"): r for r in reports}
    assert sorted(seen) == sorted(p for p, _ in urls)

    photo = by["photo"]
    assert photo.error is None and photo.kind == "image" and photo.content_type == "image/png"
    assert (photo.width, photo.height) == (512, 512)
    assert photo.nsfw == [0.25] and photo.ocr_text == "SALE 50% OFF"
    assert photo.transcript == "" and photo.transcript_error is None

    bunny = by["bunny"]
    assert bunny.error is None and bunny.kind == "video" and bunny.frames == 4
    assert bunny.nsfw == [0.25] * 4 and bunny.transcript == "hello world"
    assert 5.0 < (bunny.duration_s or 0) < 5.6

    silent = by["silent"]
    assert silent.error is None and silent.transcript_error == "no_audio_stream"

    assert "decompression-bomb" in (by["bomb"].error or "")
    assert by["corrupt"].error and by["corrupt"].nsfw == []
    assert "link-local" in (by["ssrf"].error or "")

    # Near-duplicates across posts: the recompressed copy, and the two carphone encodes.
    # Which of a pair names the other depends on which reached the index first (decode
    # times race), so the pair is checked in either direction, never in a fixed one.
    def linked(a: str, b: str) -> bool:
        return (f"post-{b}" in {d.post_id for d in by[a].duplicates}
                or f"post-{a}" in {d.post_id for d in by[b].duplicates})

    assert linked("copy", "photo") and linked("distorted", "silent")
    assert all(d.distance <= 10 for r in reports for d in r.duplicates)
    assert not any(linked("other", name) for name in by if name != "other")

    stats = pipeline.stats()
    assert stats["download"]["processed"] == 9 and stats["download"]["errors"] == 1
    assert stats["decode"]["processed"] == 8 and stats["decode"]["errors"] == 2
    assert stats["classify"]["processed"] == 6 and stats["dedup"]["processed"] == 6
    assert all(s["queue_depth"] == 0 for s in stats.values())
    assert stats["decode"]["mean_ms"] > 0
    # Nine items for two download workers: some waited, and the peak says so after the
    # queue has drained. Speech is timed on its own: the bunny is the one clip with audio.
    assert stats["download"]["peak_queue_depth"] >= 1
    assert stats["transcribe"]["processed"] == 1 and stats["transcribe"]["errors"] == 0

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert sample("grebe_media_stage_items_total", stage="decode", outcome="error") == 2
    assert sample("grebe_media_stage_items_total", stage="dedup", outcome="ok") == 6
    assert sample("grebe_media_stage_seconds_count", stage="classify") == 6
    assert sample("grebe_media_stage_seconds_count", stage="transcribe") == 1

    assert await pipeline.stop() == 0
    assert _files(work) == []  # every per-item temp dir was removed
    assert pipeline.asr is not None
    await pipeline.asr.stop()


async def test_hydrate_a_post_over_http(http_server, photo: Path, bunny: Path,
                                        tmp_path: Path) -> None:
    hostport, served = http_server
    port = hostport.split(":")[1]
    served.routes["/a.png"] = (200, {}, read_bytes(photo))
    served.routes["/v.mp4"] = (200, {}, read_bytes(bunny))

    async def resolve(host: str, port: int) -> list:
        return [ipaddress.ip_address("127.0.0.1")]

    fetcher = MediaFetcher(FetchConfig(), resolver=resolve, allow_networks=["127.0.0.1/32"])
    pipeline = _pipeline([], tmp_path, fetcher=fetcher)
    await pipeline.start()
    post = Post(id="p1", author_id="u1", media=(
        Media(kind="image", url=f"http://cdn.example:{port}/a.png"),
        Media(kind="video", url=f"http://cdn.example:{port}/v.mp4"),
    ))
    report = await pipeline.hydrate(post)
    assert [i.kind for i in report.items] == ["image", "video"]
    assert report.nsfw == (0.25,) * 5 and report.nsfw_model == "fake-nsfw"
    assert report.transcript == "hello world" and report.errors == ()
    assert report.ocr_text == "SALE 50% OFF\nSALE 50% OFF"
    await pipeline.stop()
    assert pipeline.asr is not None
    await pipeline.asr.stop()


async def test_queues_are_bounded_and_stop_abandons_cleanly(photo: Path, tmp_path: Path) -> None:
    class Stuck(ConstantImageClassifier):
        async def classify_images(self, images):  # type: ignore[no-untyped-def]
            await asyncio.sleep(30)
            return []

    work = tmp_path / "work"
    work.mkdir()
    pipeline = _pipeline([photo.parent], work)
    pipeline.nsfw = Stuck({"nsfw": 0.0})
    await pipeline.start()
    # The download queue holds only the jobs let in, in turn, by its room of 4
    # (tests/media/test_pipeline_fairness.py); the others are bounded queues.
    assert {s: q.maxsize for s, q in pipeline._queues.items()} == {
        "download": 0, "decode": 4, "classify": 4, "dedup": 2}
    jobs = [asyncio.create_task(pipeline.submit(f"p{i}", str(photo))) for i in range(30)]
    await asyncio.sleep(0.5)
    # Two classify workers are stuck: the rest wait in bounded queues, not in memory.
    depth = sum(pipeline.stats()[s]["queue_depth"] for s in ("download", "decode", "classify"))
    assert depth <= 12  # 4 + 4 + 4: the other jobs are held by their submitters
    assert await pipeline.stop(drain_window_s=0.2) == 30
    reports = await asyncio.gather(*jobs)
    assert all(r.error == "pipeline stopped before the item finished" for r in reports)
    assert _files(work) == []
    assert pipeline.asr is not None
    await pipeline.asr.stop()


async def test_near_duplicates_in_flight_together_find_each_other(photo: Path,
                                                                  tmp_path: Path) -> None:
    """Two posts with near-duplicate images, submitted at once through two dedup workers:
    whichever reaches the index second names the first, in every round."""
    copy = _recompressed(photo, tmp_path / "copy.jpg")
    config = MediaConfig(fetch=FetchConfig(allow_files=True, file_roots=[photo.parent, tmp_path]),
                         pipeline=PipelineConfig(asr=False, ocr=False, dedup_workers=2))
    pipeline = MediaPipeline(config, work_root=tmp_path)
    await pipeline.start()
    try:
        for round_ in range(3):
            a, b = await asyncio.gather(pipeline.submit(f"a{round_}", str(photo)),
                                        pipeline.submit(f"b{round_}", str(copy)))
            assert a.error is None and b.error is None
            assert (f"b{round_}" in {d.post_id for d in a.duplicates}
                    or f"a{round_}" in {d.post_id for d in b.duplicates}), (a, b)
    finally:
        await pipeline.stop()
