"""Video decoding in a child process with an address-space limit and timeouts.

A few MB of container can hold frames that decode to gigabytes (16000x16000 frames:
3 GB of RSS and 47 s in-process), and a crafted bitstream can contradict the sizes its
container declares, so the metadata caps (`video.check_limits`) are not enough alone.
Each video is therefore opened, vetted and sampled by a short-lived child process:

- the child sets RLIMIT_AS to `video.decode_memory_mb` before importing the decoders, so
  an allocation past it fails inside the child (reported as "too large"), never in the
  engine, and the machine keeps its memory;
- the parent gives it `video.probe_timeout_s` to open the container and pass the frame
  caps, and `video.decode_timeout_s` to start (a busy host starts interpreters slowly)
  and to sample the frames; it kills it past either, or when the caller gives up.

The child writes the sampled frames as BMP files into the item's work dir and reports on
stdout, one JSON object a line: ready (limit set, decoders imported), the probe (or an
error), then the frame files. It is started through grebe.core.spawn, without fork():
uvloop's fork() stalls the threads that run the models in the process that starts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grebe.core.spawn import DEVNULL, PIPE, Child, spawn
from grebe.errors import MediaError, MediaTooLargeError
from grebe.media.video_sandbox_child import FRAME_FORMAT, FRAME_SUFFIX

__all__ = ["FRAME_FORMAT", "FRAME_SUFFIX", "DecodedVideo", "decode_video"]

if TYPE_CHECKING:  # pydantic is not needed to decode: the config is read by the caller
    from grebe.media.config import VideoConfig

#: Environment for the child: one thread for BLAS and few malloc arenas, because every
#: thread's arena and stack counts against the address-space limit.
_CHILD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}
#: What the child runs: a module of its own, so its interpreter imports the decoders and
#: nothing of the parent's side (asyncio alone was ~30 ms CPU of every video's child).
CHILD_MODULE = "grebe.media.video_sandbox_child"
_LOG_NAME = "decode.log"
_MIB = 1024 * 1024


@dataclass(frozen=True)
class DecodedVideo:
    """What the child found: stream facts and the sampled frames' image files."""

    duration_s: float
    width: int
    height: int
    has_video: bool
    has_audio: bool
    frames: list[Path]


async def decode_video(path: Path, workdir: Path, config: VideoConfig) -> DecodedVideo:
    """Probe, vet and sample `path` in a child process; frames land in `workdir`.

    Raises MediaTooLargeError (a cap, or the memory limit), MediaError (not media,
    corrupt, timed out). Cancelling this kills the child."""
    request = {
        "path": str(path), "workdir": str(workdir), "frames": config.frames,
        "max_side": config.frame_max_side, "memory_bytes": config.decode_memory_mb * _MIB,
        "limits": {"max_frame_pixels": config.max_frame_pixels,
                   "max_frame_bytes": config.max_frame_bytes,
                   "max_frames": config.max_frames,
                   "max_duration_s": config.max_duration_s},
    }
    log_path = workdir / _LOG_NAME
    with log_path.open("wb") as log:
        proc = await spawn(
            sys.executable, "-m", CHILD_MODULE, json.dumps(request),
            stdin=DEVNULL, stdout=PIPE, stderr=log, env={**os.environ, **_CHILD_ENV},
        )
    try:
        # Starting an interpreter and importing the decoders is not the file's doing and
        # can be slow on a busy host: it gets the decode allowance, not the probe's.
        await _next(proc, config.decode_timeout_s, path, config, log_path,
                    f"the decoder process for {path} did not start within "
                    f"{config.decode_timeout_s:g}s (video.decode_timeout_s)")
        probed = await _next(proc, config.probe_timeout_s, path, config, log_path,
                             f"probing {path} took longer than {config.probe_timeout_s:g}s "
                             "(video.probe_timeout_s)")
        frames: list[Path] = []
        if probed["probe"]["has_video"]:
            sampled = await _next(proc, config.decode_timeout_s, path, config, log_path,
                                  f"decoding {path} took longer than "
                                  f"{config.decode_timeout_s:g}s (video.decode_timeout_s)")
            frames = [Path(p) for p in sampled["frames"]]
        info = probed["probe"]
        return DecodedVideo(
            duration_s=float(info["duration_s"]), width=int(info["width"]),
            height=int(info["height"]), has_video=bool(info["has_video"]),
            has_audio=bool(info["has_audio"]), frames=frames,
        )
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        await asyncio.shield(proc.wait())
        log_path.unlink(missing_ok=True)


async def _next(proc: Child, timeout_s: float, path: Path,
                config: VideoConfig, log_path: Path, too_slow: str) -> dict[str, Any]:
    """The child's next report line within `timeout_s`; an error line, a dead child or
    garbage becomes the item's error."""
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(timeout_s):
            line = await proc.stdout.readline()
            if not line:
                await proc.wait()
    except TimeoutError:
        raise MediaError(too_slow) from None
    return _parse(line, proc, path, config, log_path)


def _parse(line: bytes, proc: Child, path: Path, config: VideoConfig,
           log_path: Path) -> dict[str, Any]:
    if not line:
        # No line: the child died (a signal, or the limit hit where Python could not
        # even report it). Its stderr says what it managed to.
        tail = log_path.read_bytes()[-300:].decode("utf-8", "replace").strip()
        if "MemoryError" in tail or "Cannot allocate memory" in tail:
            raise MediaTooLargeError(_over_memory(path, config))
        raise MediaError(f"decoding {path} failed: the decoder process exited "
                         f"({proc.returncode}) {tail}".strip())
    try:
        message: dict[str, Any] = json.loads(line)
    except ValueError as exc:
        raise MediaError(f"decoding {path} failed: unreadable report from the decoder "
                         f"process: {line[:200]!r}") from exc
    if "error" in message:
        if message.get("memory"):
            raise MediaTooLargeError(_over_memory(path, config))
        error = MediaTooLargeError if message.get("too_large") else MediaError
        raise error(message["error"])
    return message


def _over_memory(path: Path, config: VideoConfig) -> str:
    return (f"decoding {path} needed more than {config.decode_memory_mb} MiB "
            "(video.decode_memory_mb): treated as a decompression bomb")
