"""Video bombs (issue 9): frame caps from the container's metadata, decoding in a child
process with an address-space limit and timeouts, and the child killed with its caller.

Before: a 6 MB MOV of 16000x16000 frames decoded in-process took 3.09 GB of RSS and 47 s
on this machine; 16-bit RGBA frames, more."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from media_bombs import video_bomb  # tests/media is on sys.path (no package)

from grebe.errors import MediaError, MediaTooLargeError
from grebe.media.config import VideoConfig
from grebe.media.video_sandbox import decode_video

CHILD_MARK = b"grebe.media.video_sandbox"


@pytest.fixture(scope="session")
def bomb_16k(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The issue's bomb: a ~6 MB MOV of 16000x16000 RGB frames (768 MB each decoded)."""
    return video_bomb(tmp_path_factory.mktemp("bombs") / "bomb16k.mov", 16000)


def _size(path: Path) -> int:
    return path.stat().st_size


def _names(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def _sandbox_children() -> list[int]:
    """Pids of this process's live decoding children (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = next((line.split()[1] for line in status.splitlines()
                     if line.startswith("PPid:")), "")
        if ppid == str(os.getpid()) and CHILD_MARK in cmdline and "State:\tZ" not in status:
            found.append(int(entry.name))
    return found


async def test_16000_square_frames_are_refused_from_metadata(bomb_16k: Path,
                                                             tmp_path: Path) -> None:
    assert _size(bomb_16k) < 8 * 1024 * 1024
    with pytest.raises(MediaTooLargeError, match=r"16000x16000 = 256000000 pixel frames.*"
                                                 r"max_frame_pixels"):
        await decode_video(bomb_16k, tmp_path, VideoConfig())
    assert _names(tmp_path) == []


async def test_16_bit_rgba_frames_are_refused(tmp_path: Path) -> None:
    """The issue's 16-bit RGBA bomb (8.16 GB in-process) is refused by its pixels; under
    a lower byte cap, a 4000x4000 one is refused by its bytes (8 a pixel: 128 MB)."""
    # Refused from the container's metadata alone, so its frames need not be real.
    path = video_bomb(tmp_path / "rgba64.mov", 64, colour="rgba", depth=16, declared=16000)
    with pytest.raises(MediaTooLargeError, match=r"max_frame_pixels"):
        await decode_video(path, tmp_path, VideoConfig())
    path = video_bomb(tmp_path / "rgba64-4k.mov", 4000, colour="rgba", depth=16, frames=2)
    with pytest.raises(MediaTooLargeError, match=r"decode to 128000000 bytes.*max_frame_bytes"):
        await decode_video(path, tmp_path, VideoConfig(max_frame_bytes=64 * 1024 * 1024))


async def test_a_frame_bigger_than_its_container_says_is_refused(tmp_path: Path) -> None:
    """The container declares 64x64 (passes the metadata caps); the PNG inside is
    12000x12000. Opened with its decoder in the child, the real size shows and is refused
    before the frames are sampled."""
    path = video_bomb(tmp_path / "liar.mov", 12000, frames=2, declared=64)
    with pytest.raises(MediaTooLargeError, match=r"12000x12000 = 144000000 pixel frames"):
        await decode_video(path, tmp_path, VideoConfig())


async def test_decoding_past_the_memory_limit_is_too_large_not_a_crash(tmp_path: Path) -> None:
    """Caps relaxed so only the child's address-space limit stands between a 432 MB
    frame and the machine: the child fails, the caller gets a clean MediaTooLargeError."""
    path = video_bomb(tmp_path / "big.mov", 12000, frames=2)
    config = VideoConfig(decode_memory_mb=384, frames=2, max_frame_pixels=10**9,
                         max_frame_bytes=10**10)
    with pytest.raises(MediaTooLargeError, match=r"needed more than 384 MiB"):
        await decode_video(path, tmp_path, config)
    assert _sandbox_children() == []


async def test_frame_count_and_duration_caps(bunny: Path, tmp_path: Path) -> None:
    with pytest.raises(MediaTooLargeError, match=r"frames, over the cap of 10 \(video.max_frames"):
        await decode_video(bunny, tmp_path, VideoConfig(max_frames=10))
    with pytest.raises(MediaTooLargeError, match=r"over the cap of 2s"):
        await decode_video(bunny, tmp_path, VideoConfig(max_duration_s=2))


async def test_a_normal_video_decodes_in_the_child(bunny: Path, tmp_path: Path) -> None:
    decoded = await decode_video(bunny, tmp_path, VideoConfig(frames=3, frame_max_side=96))
    assert decoded.has_video and decoded.has_audio and (decoded.width, decoded.height) == (
        1280, 720)
    assert 5.0 < decoded.duration_s < 5.6
    assert [p.name for p in decoded.frames] == [f"frame-{i:03d}.bmp" for i in range(3)]
    assert _names(tmp_path) == [p.name for p in decoded.frames]


async def test_frames_are_written_uncompressed(bunny: Path, tmp_path: Path) -> None:
    """Scratch frames are read three times (NSFW, OCR, dedup) and removed with the item:
    compressing them (PNG) cost more CPU than any reader saved; BMP holds the same pixels."""
    from PIL import Image

    from grebe.media.video import sample_frames

    decoded = await decode_video(bunny, tmp_path, VideoConfig(frames=3, frame_max_side=96))
    direct = sample_frames(bunny, 3, max_side=96)
    for path, frame in zip(decoded.frames, direct, strict=True):
        with Image.open(path) as image:
            assert image.format == "BMP" and image.mode == "RGB"
            assert image.tobytes() == frame.rgb.tobytes()


async def test_probe_and_decode_timeouts_are_enforced(bunny: Path, tmp_path: Path) -> None:
    with pytest.raises(MediaError, match=r"video.probe_timeout_s"):
        await decode_video(bunny, tmp_path, VideoConfig(probe_timeout_s=0.001))
    with pytest.raises(MediaError, match=r"video.decode_timeout_s"):
        await decode_video(bunny, tmp_path, VideoConfig(decode_timeout_s=0.001, frames=8))
    assert _sandbox_children() == []  # both children were killed and reaped


async def test_cancelling_kills_the_child(bunny: Path, tmp_path: Path) -> None:
    task = asyncio.create_task(decode_video(bunny, tmp_path, VideoConfig(frames=8)))
    async with asyncio.timeout(30):
        while not _sandbox_children():  # noqa: ASYNC110  # another process: no event
            await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _sandbox_children() == []


def test_the_child_imports_the_decoders_and_not_the_parents_side() -> None:
    """One child starts per video: its imports are paid once a video. It ran the parent's
    module (asyncio and all, ~30 ms CPU of each child); now a module of its own."""
    import subprocess
    import sys

    from grebe.media import video_sandbox

    probe = (f"import runpy, sys; sys.argv = ['x', '{{}}']\n"
             f"try: runpy.run_module('{video_sandbox.CHILD_MODULE}', run_name='not_main')\n"
             "finally: print(sorted(m for m in ('asyncio', 'av', 'pydantic', 'numpy') "
             "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"  # nothing heavy at import; `av` only once limited
