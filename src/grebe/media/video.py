"""Video probing, evenly spaced frame sampling (PyAV) and audio extraction (ffmpeg).

All of it is blocking: run it in a thread (PyAV releases the GIL while decoding) or in a
worker process. Memory stays bounded: frames are decoded one at a time, seeking between
sample points, and only the scaled-down samples are kept. Untrusted containers may name
other resources (HLS playlists, QuickTime references), so both PyAV and ffmpeg are
limited to the `file` protocol, and ffmpeg always gets an argument list.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import av

from grebe.errors import MediaError, MediaTooLargeError

if TYPE_CHECKING:  # the decoding child imports this module; numpy is a second to import
    import numpy as np
    from PIL import Image

T = TypeVar("T")

FFMPEG = "ffmpeg"
ASR_SAMPLE_RATE = 16_000
_AV_OPTIONS = {"protocol_whitelist": "file"}
# Opening a container normally decodes a frame or more to fill in missing stream facts
# (a 16000x16000 PNG-in-MOV frame: 768 MB before any check could run). With no decoder
# allowed, only the container's own metadata is read; the pixel format stays unknown.
_METADATA_ONLY = {**_AV_OPTIONS, "codec_whitelist": "none"}
_SEEK_GAP_S = 1.0  # beyond this gap to the next sample, seek instead of decoding through
WORST_BITS_PER_PIXEL = 64
_NO_AUDIO_MARKERS = ("does not contain any stream", "matches no streams", "Output file is empty")


class FFmpegError(MediaError):
    """ffmpeg exited with an error (corrupt or unsupported input)."""


class FFmpegTimeoutError(FFmpegError):
    """ffmpeg ran past its time limit and was killed."""


@dataclass(frozen=True)
class VideoProbe:
    duration_s: float
    width: int
    height: int
    fps: float | None
    has_video: bool
    has_audio: bool
    audio_codec: str | None = None
    video_codec: str | None = None
    pix_fmt: str | None = None  # the decoded pixel format the container declares
    frame_count: int = 0  # declared, or duration x rate when the container omits it


@dataclass(frozen=True)
class FrameLimits:
    """What a video may declare before a single frame is decoded (bomb guard)."""

    max_frame_pixels: int
    max_frame_bytes: int
    max_frames: int
    max_duration_s: float


def frame_bytes(width: int, height: int, pix_fmt: str | None) -> int:
    """Bytes of one decoded frame; an unknown format counts as the widest (8 bytes a
    pixel, 16-bit RGBA), so a container that hides its format is judged at its worst."""
    bits = WORST_BITS_PER_PIXEL
    if pix_fmt:
        with contextlib.suppress(ValueError, av.FFmpegError):  # a name PyAV does not know
            bits = av.VideoFormat(pix_fmt).padded_bits_per_pixel or WORST_BITS_PER_PIXEL
    return width * height * bits // 8


def check_limits(info: VideoProbe, limits: FrameLimits, what: str | Path = "video") -> None:
    """MediaTooLargeError if the container's own metadata says decoding would be too big:
    frame width x height, decoded bytes per frame, frame count, duration."""
    pixels = info.width * info.height
    if pixels > limits.max_frame_pixels:
        raise MediaTooLargeError(
            f"{what} has {info.width}x{info.height} = {pixels} pixel frames, over the cap of "
            f"{limits.max_frame_pixels} (video.max_frame_pixels)")
    size = frame_bytes(info.width, info.height, info.pix_fmt)
    if size > limits.max_frame_bytes:
        raise MediaTooLargeError(
            f"{what} frames decode to {size} bytes ({info.width}x{info.height} "
            f"{info.pix_fmt or 'unknown format'}), over the cap of {limits.max_frame_bytes} "
            "(video.max_frame_bytes)")
    if info.frame_count > limits.max_frames:
        raise MediaTooLargeError(
            f"{what} has {info.frame_count} frames, over the cap of {limits.max_frames} "
            "(video.max_frames)")
    if info.duration_s > limits.max_duration_s:
        raise MediaTooLargeError(
            f"{what} lasts {info.duration_s:.1f}s, over the cap of {limits.max_duration_s:g}s")


@dataclass(frozen=True)
class SampledFrame:
    index: int  # which sample (0..count-1)
    time_s: float  # presentation time of the decoded frame
    rgb: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class AudioResult:
    """The extracted 16 kHz mono WAV, or `no_audio` — a normal outcome, not an error."""

    path: Path | None
    no_audio: bool = False

    @classmethod
    def none(cls) -> AudioResult:
        return cls(path=None, no_audio=True)


def _open(path: str | Path, *, decoders: bool = True) -> av.container.InputContainer:
    options = _AV_OPTIONS if decoders else _METADATA_ONLY
    try:
        return av.open(str(path), mode="r", options=options)
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise MediaError(f"cannot open video {path}: {exc}") from exc


def _duration(container: av.container.InputContainer) -> float:
    if container.duration is not None and container.duration > 0:
        return float(container.duration / av.time_base)
    best = 0.0
    for stream in container.streams:
        if stream.duration and stream.time_base:
            best = max(best, float(stream.duration * stream.time_base))
    return best


def probe(path: str | Path, *, max_duration_s: float | None = None,
          decoders: bool = True) -> VideoProbe:
    """Streams and duration from the container header; MediaError if it is not media.
    `decoders=False` reads the container's metadata alone, decoding nothing (the bomb
    check); then `pix_fmt` is unknown."""
    container = _open(path, decoders=decoders)
    try:
        video = container.streams.video[0] if container.streams.video else None
        audio = container.streams.audio[0] if container.streams.audio else None
        if video is None and audio is None:
            raise MediaError(f"{path} has neither a video nor an audio stream")
        duration = _duration(container)
        if max_duration_s is not None and duration > max_duration_s:
            raise MediaTooLargeError(
                f"{path} lasts {duration:.1f}s, over the cap of {max_duration_s:g}s"
            )
        rate = video.average_rate if video is not None else None
        frame_count = int(video.frames or 0) if video is not None else 0
        if video is not None and not frame_count and rate:
            frame_count = int(duration * float(rate))
        return VideoProbe(
            duration_s=duration,
            width=video.codec_context.width if video is not None else 0,
            height=video.codec_context.height if video is not None else 0,
            fps=float(rate) if rate else None,
            has_video=video is not None,
            has_audio=audio is not None,
            audio_codec=audio.codec_context.name if audio is not None else None,
            video_codec=video.codec_context.name if video is not None else None,
            pix_fmt=video.codec_context.pix_fmt if video is not None else None,
            frame_count=frame_count,
        )
    finally:
        container.close()


def sample_times(duration_s: float, count: int) -> list[float]:
    """The midpoints of `count` equal slices: deterministic and never the black first or
    last frame that a naive 0..duration spacing picks."""
    return [duration_s * (i + 0.5) / count for i in range(count)]


def _scaled(width: int, height: int, max_side: int) -> tuple[int, int]:
    scale = min(1.0, max_side / max(width, height))
    # Even sizes keep swscale happy for subsampled pixel formats.
    return max(2, round(width * scale) // 2 * 2), max(2, round(height * scale) // 2 * 2)


def sample_frames(path: str | Path, count: int, *, max_side: int = 512,
                  max_frame_pixels: int | None = None, threads: int = 0) -> list[SampledFrame]:
    """`count` frames at evenly spaced times (fewer if the clip has fewer frames).

    For each target time the first frame at or after it is taken, so the same file always
    gives the same frames whether it got there by seeking or by decoding through. A
    decoded frame bigger than `max_frame_pixels` (its bitstream contradicting the
    container) stops sampling; `threads` caps decoder threads (0: FFmpeg's choice)."""
    sampled = _sample(path, count, max_side, max_frame_pixels, threads,
                      lambda frame, w, h: frame.to_ndarray(format="rgb24", width=w, height=h))
    return [SampledFrame(index=i, time_s=t, rgb=rgb) for i, t, rgb in sampled]


def sample_images(path: str | Path, count: int, *, max_side: int = 512,
                  max_frame_pixels: int | None = None,
                  threads: int = 0) -> list[tuple[int, float, Image.Image]]:
    """`sample_frames` as (index, time, RGB PIL image): what the decoding child saves,
    without importing numpy (a second of start-up on a busy host)."""
    return _sample(path, count, max_side, max_frame_pixels, threads,
                   lambda frame, w, h: frame.to_image(width=w, height=h))


def _sample(path: str | Path, count: int, max_side: int, max_frame_pixels: int | None,
            threads: int, convert: Callable[[av.VideoFrame, int, int], T],
            ) -> list[tuple[int, float, T]]:
    if count < 1:
        raise ValueError("count must be >= 1")
    container = _open(path)
    try:
        if not container.streams.video:
            raise MediaError(f"{path} has no video stream")
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        if threads:
            stream.codec_context.thread_count = threads
        duration = _duration(container)
        time_base = stream.time_base
        if not duration or time_base is None:
            raise MediaError(f"{path} has no usable duration or time base")
        targets = sample_times(duration, count)
        out: list[tuple[int, float, T]] = []
        frames = None
        position = -1.0
        seek_gap = _SEEK_GAP_S
        for index, target in enumerate(targets):
            sought_from = None
            if frames is None or target - position > seek_gap:
                container.seek(int(target / time_base), stream=stream, backward=True)
                frames = container.decode(stream)
                sought_from = position
            chosen = None
            for frame in frames:
                position = float(frame.time) if frame.time is not None else position
                if sought_from is not None:
                    # The keyframe a seek lands on is before its target. At or before
                    # where decoding already was, the seek only made the decoder do the
                    # frames again (a clip with one keyframe: every sample decoded from
                    # 0). Keyframes are at least this far apart here: seek only past it.
                    if 0 <= position <= sought_from:
                        seek_gap = max(seek_gap, target - position)
                    sought_from = None
                chosen = frame
                if position >= target - 1e-6:
                    break
            if chosen is None:
                break  # end of stream: the clip is shorter than its header claims
            if max_frame_pixels is not None and chosen.width * chosen.height > max_frame_pixels:
                raise MediaTooLargeError(
                    f"{path} decodes to {chosen.width}x{chosen.height} frames, over the cap "
                    f"of {max_frame_pixels} pixels (video.max_frame_pixels)")
            width, height = _scaled(chosen.width, chosen.height, max_side)
            out.append((index, position, convert(chosen, width, height)))
        if not out:
            raise MediaError(f"no frame could be decoded from {path}")
        return out
    except av.FFmpegError as exc:
        raise MediaError(f"cannot decode video {path}: {exc}") from exc
    finally:
        container.close()


def extract_audio(
    src: str | Path, dst: str | Path, *, timeout_s: float, max_seconds: float | None = None
) -> AudioResult:
    """The first audio stream as 16 kHz mono 16-bit WAV at `dst`.

    Returns AudioResult.none() when the input has no audio stream; raises
    FFmpegTimeoutError past `timeout_s` (the process is killed) and FFmpegError when
    ffmpeg fails (corrupt input)."""
    src, dst = Path(src).resolve(), Path(dst).resolve()
    try:
        if not probe(src, decoders=False).has_audio:  # metadata only: decode nothing here
            return AudioResult.none()
    except MediaTooLargeError:
        raise
    except MediaError as exc:
        raise FFmpegError(str(exc)) from exc
    # "file:" keeps a name like "concat:..." or "-x" from being read as a protocol/option.
    args = [FFMPEG, "-nostdin", "-hide_banner", "-loglevel", "error", "-y",
            "-protocol_whitelist", "file", "-i", f"file:{src}",
            "-map", "0:a:0", "-vn", "-sn", "-dn", "-ac", "1", "-ar", str(ASR_SAMPLE_RATE),
            "-c:a", "pcm_s16le"]
    if max_seconds is not None:
        args += ["-t", f"{max_seconds:g}"]
    args += ["-f", "wav", f"file:{dst}"]
    try:
        done = subprocess.run(args, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        dst.unlink(missing_ok=True)
        raise FFmpegTimeoutError(
            f"ffmpeg took longer than {timeout_s:g}s extracting audio from {src}"
        ) from exc
    except OSError as exc:
        raise FFmpegError(f"cannot run ffmpeg: {exc}") from exc
    stderr = done.stderr.decode("utf-8", "replace").strip()
    if done.returncode != 0:
        dst.unlink(missing_ok=True)
        if any(marker in stderr for marker in _NO_AUDIO_MARKERS):
            return AudioResult.none()
        raise FFmpegError(f"ffmpeg failed on {src} (exit {done.returncode}): {stderr[-500:]}")
    return AudioResult(path=dst)
