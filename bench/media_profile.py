"""Where a scanned video's CPU goes: each step of `grebe media scan`, run one video at a
time on the same cached clips, CPU seconds per video by step.

    nice -n 19 .venv/bin/python bench/media_profile.py [--videos 40] [--json]

The steps are the pipeline's own functions, called in the order the stages call them:

- decode: the sandboxed child (`video_sandbox.decode_video`): interpreter start and
  imports, the two probes, sampling and the PNG frames (CPU of the child, which exits);
- of which `child start`: the same child's interpreter and imports alone (a request it
  rejects at once), so the rest is the video's own work;
- nsfw: the open-nsfw classifier on the video's frames (this process, its threads);
- ocr: tesseract on the middle frame (a child per call);
- asr: ffmpeg audio extraction plus Whisper tiny.en in this process (what an ASR worker
  does per job), speech clips only; `asr (per speech clip)` divides by those;
- dedup: perceptual hashes of the frames (this process).

CPU, not wall clock, is the figure: it holds on a machine shared with other work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

from media_clips import clip_plan, default_cache_dir

from grebe.media.asr import ASRProcessor, transcribe_wav
from grebe.media.config import MediaConfig
from grebe.media.dedup import perceptual_hash
from grebe.media.scan import default_models
from grebe.media.video import extract_audio
from grebe.media.video_sandbox import decode_video


def _cpu() -> tuple[float, float]:
    """(this process, its exited children) CPU seconds."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def _spent(before: tuple[float, float]) -> float:
    after = _cpu()
    return (after[0] - before[0]) + (after[1] - before[1])


async def profile(n: int) -> dict:
    config = MediaConfig()
    clips = [c for c in clip_plan(n, default_cache_dir()) if c.path.is_file()][:n]
    models = default_models(config)
    for model in models.values():
        if hasattr(model, "start"):
            await model.start()
    nsfw, ocr = models.get("nsfw"), models.get("ocr")
    from faster_whisper import WhisperModel

    settings = ASRProcessor(config.asr, config.video).settings
    whisper = WhisperModel(settings.model_path, device="cpu", compute_type=settings.compute_type,
                           cpu_threads=settings.cpu_threads, local_files_only=True)
    steps = {"decode": 0.0, "child start": 0.0, "nsfw": 0.0, "ocr": 0.0, "asr": 0.0,
             "dedup": 0.0}
    frames = speech = 0
    started = time.monotonic()
    for clip in clips:
        with tempfile.TemporaryDirectory(prefix="grebe-prof-") as tmp:
            work = Path(tmp)
            before = _cpu()
            with __import__("contextlib").suppress(Exception):
                await decode_video(work / "missing.mp4", work, config.video)
            steps["child start"] += _spent(before)
            before = _cpu()
            decoded = await decode_video(clip.path, work, config.video)
            steps["decode"] += _spent(before)
            views = [str(p) for p in decoded.frames]
            frames += len(views)
            if nsfw is not None:
                before = _cpu()
                await nsfw.classify_images(views)
                steps["nsfw"] += _spent(before)
            if ocr is not None:
                before = _cpu()
                await ocr.read_text(views[len(views) // 2])
                steps["ocr"] += _spent(before)
            before = _cpu()
            from PIL import Image

            for view in views:
                with Image.open(view) as image:
                    perceptual_hash(image.convert("RGB"), config.dedup.hash)
            steps["dedup"] += _spent(before)
            if decoded.has_audio:
                speech += 1
                before = _cpu()
                audio = extract_audio(clip.path, work / "audio.wav", timeout_s=60)
                assert audio.path is not None
                transcribe_wav(whisper, audio.path, settings, time.monotonic() + 120)
                steps["asr"] += _spent(before)
    for model in models.values():
        if hasattr(model, "stop"):
            await model.stop()
    videos = len(clips)
    per_video = {k: v / videos for k, v in steps.items()}
    per_video["asr (per speech clip)"] = steps["asr"] / speech if speech else 0.0
    per_video["total (decode+nsfw+ocr+asr+dedup)"] = sum(
        steps[k] for k in ("decode", "nsfw", "ocr", "asr", "dedup")) / videos
    return {"videos": videos, "speech": speech, "frames": frames,
            "wall_s": time.monotonic() - started, "cpu_s_per_video": per_video}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--videos", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(profile(args.videos))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['videos']} videos ({result['speech']} with speech, {result['frames']} "
          f"frames) in {result['wall_s']:.1f} s; CPU s per video by step:")
    for step, value in result["cpu_s_per_video"].items():
        print(f"  {step:<36} {value:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
