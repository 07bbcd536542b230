"""The decoding child of `grebe.media.video_sandbox`: run as `python -m` with one JSON
request, it limits its own memory, probes, vets, samples and saves the frames, and
reports on stdout, one JSON object a line.

A module of its own so that the child, started once per video, imports only what
decoding needs (PyAV and the standard library), not the parent's asyncio side.
"""

from __future__ import annotations

import json
import resource
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from grebe.errors import MediaError, MediaTooLargeError

DECODER_THREADS = 2
#: The frames are scratch files, written once and read by NSFW, OCR and dedup in the same
#: item's directory, then removed: uncompressed BMP. PNG (zlib level 1) cost 64 ms CPU a
#: video to write (8 frames of up to 512 px; BMP 5 ms) and more to read back three times.
FRAME_FORMAT, FRAME_SUFFIX = "BMP", ".bmp"


def _emit(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _out_of_memory(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, MemoryError) or "Cannot allocate memory" in str(seen):
            return True
        seen = seen.__cause__
    return False


def child_main(raw: str) -> int:
    """Run in the child: limit memory first, then probe, vet, sample and save."""
    request = json.loads(raw)
    limit = int(request["memory_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        from grebe.media import video

        _emit({"ready": True})
        path, workdir = Path(request["path"]), Path(request["workdir"])
        limits = video.FrameLimits(**request["limits"])
        # First the container's own metadata, nothing decoded; then opened with decoders
        # (which may decode a frame, under the memory limit) and checked again, because
        # a bitstream can contradict its container and only decoding shows the format.
        video.check_limits(video.probe(path, decoders=False), limits, path)
        info = video.probe(path)
        video.check_limits(info, limits, path)
        _emit({"probe": asdict(info)})
        if info.has_video:
            frames = video.sample_images(
                path, int(request["frames"]), max_side=int(request["max_side"]),
                max_frame_pixels=limits.max_frame_pixels, threads=DECODER_THREADS)
            files = []
            for index, _time_s, image in frames:
                out = workdir / f"frame-{index:03d}{FRAME_SUFFIX}"
                image.save(out, format=FRAME_FORMAT)
                files.append(str(out))
            _emit({"frames": files})
    except MediaTooLargeError as exc:
        _emit({"error": str(exc), "too_large": True})
    except MediaError as exc:
        _emit({"error": str(exc), "memory": _out_of_memory(exc)})
    except MemoryError:
        _emit({"error": "out of memory", "memory": True})
    return 0


if __name__ == "__main__":
    raise SystemExit(child_main(sys.argv[1]))
