"""Which media items count as unchecked (fail closed, issue 9), on real files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from media_bombs import video_bomb  # tests/media is on sys.path (no package)

from grebe.errors import InferenceError
from grebe.inference.fakes import ConstantImageClassifier
from grebe.media.config import FetchConfig, MediaConfig, PipelineConfig
from grebe.media.pipeline import MediaPipeline
from grebe.types import Media, Post


class BrokenNSFW(ConstantImageClassifier):
    async def classify_images(self, images):  # type: ignore[no-untyped-def]
        raise InferenceError("nsfw backend down")


async def _report(paths: list[Path], tmp_path: Path, **models: object):  # type: ignore[no-untyped-def]
    config = MediaConfig(fetch=FetchConfig(allow_files=True,
                                           file_roots=sorted({p.parent for p in paths})),
                         pipeline=PipelineConfig(asr=False, ocr=False))
    pipeline = MediaPipeline(config, work_root=tmp_path, **models)  # type: ignore[arg-type]
    await pipeline.start()
    try:
        media = tuple(Media(kind="image", url=str(p)) for p in paths)
        return await pipeline.hydrate(Post(id="p", author_id="a", media=media))
    finally:
        await pipeline.stop()


async def test_pictures_nobody_scored_for_nudity_are_unchecked(photo: Path,
                                                                tmp_path: Path) -> None:
    report = await _report([photo], tmp_path)
    assert report.unchecked == (f"{photo}: not scored for nudity (no NSFW model configured)",)
    report = await _report([photo], tmp_path, nsfw=BrokenNSFW({"nsfw": 0.0}))
    assert report.unchecked == (f"{photo}: not scored for nudity (nsfw: nsfw backend down)",)
    scored = await _report([photo], tmp_path, nsfw=ConstantImageClassifier({"nsfw": 0.1}))
    assert scored.unchecked == ()


async def test_speech_nobody_transcribed_is_unchecked(bunny: Path, silent_clip: Path,
                                                      tmp_path: Path) -> None:
    report = await _report([bunny, silent_clip], tmp_path,
                           nsfw=ConstantImageClassifier({"nsfw": 0.1}))
    assert report.unchecked == (f"{bunny}: speech not transcribed (no_asr_configured)",)


def test_audio_extraction_reads_metadata_only(tmp_path: Path) -> None:
    """Asking a 16000x16000 video bomb for its audio must not decode a frame in-process
    (opening it with decoders did: 768 MB)."""
    bomb = video_bomb(tmp_path / "bomb.mov", 16000, frames=2)
    code = (
        "import json, resource, sys\n"
        "from grebe.media.video import extract_audio\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "result = extract_audio(sys.argv[1], sys.argv[2], timeout_s=60)\n"
        "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(json.dumps({'no_audio': result.no_audio, 'grew_mb': (after - before) / 1024}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(bomb), str(tmp_path / "a.wav")],
                          capture_output=True, timeout=120, check=True)
    report = json.loads(done.stdout)
    assert report["no_audio"] is True and report["grew_mb"] < 50, report
