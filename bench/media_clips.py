"""The short real videos bench/media_volume.py feeds the pipeline, made once and kept.

Made with ffmpeg from packaged data: a slow pan across a scikit-image photo (so the
frames of one clip differ, and the offset differs per clip, so near-duplicate search has
real work and real matches), libx264 at 10 fps; every other clip carries moonshine-voice's
real speech recording, looped. Lengths 1-20 s and heights 160-720 vary deterministically
with the clip's index, so clip i is the same file in every run.

Making 1,000 of them costs minutes of both cores, so they live in a cache directory
outside git (`default_cache_dir()`, or `--cache-dir`) and a run makes only the ones
missing. Each is written under a temporary name and renamed into place, so a run killed
half way never leaves a truncated clip for the next run to trust. The directory name
carries RECIPE: change how clips are made, bump it, and old clips are never reused.
"""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from grebe.commands.demo_set import PHOTOS, skimage_dir, speech_wav

RECIPE = "v1"  # bump when make_clip changes: the cache directory is per recipe
HEIGHTS = (160, 240, 360, 480, 720)
FPS = 10
MAX_SECONDS = 20
CACHE_ENV = "GREBE_BENCH_CACHE"  # overrides ~/.cache/grebe
MAKE_TIMEOUT_S = 900  # one clip, under nice on a loaded machine (120 s was hit at load 15)


@dataclass(frozen=True)
class Clip:
    path: Path
    seconds: int
    height: int
    audio: bool


def default_cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "grebe"
    return Path(root) / "media_volume"


def clip_plan(n: int, cache_dir: Path) -> list[Clip]:
    """Deterministic variety: lengths 1..20 s, five sizes, speech on every other clip.
    The file name says all three, so a clip is never mistaken for another."""
    directory = cache_dir / f"{RECIPE}-{FPS}fps"
    clips = []
    for i in range(n):
        seconds, height, audio = 1 + (i * 7) % MAX_SECONDS, HEIGHTS[i % len(HEIGHTS)], i % 2 == 0
        name = f"clip-{i:05d}-{seconds}s-{height}p-{'speech' if audio else 'mute'}.mp4"
        clips.append(Clip(directory / name, seconds, height, audio))
    return clips


def make_clip(clip: Clip, photo: Path, wav: Path, salt: int) -> bool:
    """One clip, written to a temporary name in its directory, then renamed into place.
    A clip another run made meanwhile is kept, so several runs can fill one cache."""
    if clip.path.is_file():
        return False
    offset = (salt * 0.137) % 1
    pan = (f"crop=iw*3/4:ih*3/4:(iw/4)*t/{clip.seconds}:(ih/4)*{offset:.3f},"
           f"scale=-2:{clip.height},format=yuv420p")
    args = ["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-loop", "1",
            "-framerate", str(FPS), "-i", str(photo)]
    if clip.audio:
        args += ["-stream_loop", "-1", "-i", str(wav)]
    args += ["-t", str(clip.seconds), "-vf", pan, "-r", str(FPS), "-c:v", "libx264",
             "-preset", "ultrafast", "-threads", "1"]
    args += ["-c:a", "aac", "-shortest"] if clip.audio else ["-an"]
    partial = clip.path.with_name(f".{clip.path.stem}.{os.getpid()}.partial")
    try:
        subprocess.run([*args, "-f", "mp4", str(partial)], check=True, capture_output=True,
                       timeout=MAKE_TIMEOUT_S)
        partial.replace(clip.path)
    finally:
        partial.unlink(missing_ok=True)
    return True


@dataclass(frozen=True)
class Made:
    clips: list[Clip]
    made: int  # made in this run; the rest came from the cache
    wall_s: float
    mb: float

    @property
    def reused(self) -> int:
        return len(self.clips) - self.made


def ensure_clips(n: int, cache_dir: Path, workers: int | None = None,
                 reverse: bool = False) -> Made:
    """The first n clips of the plan, making those not in the cache yet (`reverse`: the
    last first, so a second run filling the same cache meets the first only at the end)."""
    clips = clip_plan(n, cache_dir)
    clips[0].path.parent.mkdir(parents=True, exist_ok=True)
    missing = [(i, c) for i, c in enumerate(clips) if not c.path.is_file()]
    if reverse:
        missing.reverse()
    photos = [skimage_dir() / name for name in PHOTOS]
    wav = speech_wav()
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 2) as pool:
        made = sum(pool.map(lambda ic: make_clip(ic[1], photos[ic[0] % len(photos)], wav, ic[0]),
                            missing))
    wall = time.monotonic() - started
    mb = sum(c.path.stat().st_size for c in clips) / 2**20
    return Made(clips=clips, made=made, wall_s=wall, mb=mb)


if __name__ == "__main__":  # make (or top up) the cache on its own: media_clips.py N [reverse]
    import sys

    done = ensure_clips(int(sys.argv[1]) if len(sys.argv) > 1 else 1000, default_cache_dir(),
                        reverse="reverse" in sys.argv[2:])
    print(f"{len(done.clips)} clips in {done.clips[0].path.parent}: {done.made} made in "
          f"{done.wall_s:.1f} s, {done.reused} reused, {done.mb:.1f} MB")
