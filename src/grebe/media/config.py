"""The `media:` section of the grebe config (`GrebeConfig.media` is `MediaConfig`, so
it is validated with the rest at load). The package owns its knobs: every default lives
in this one file."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from grebe.settings_base import Section

#: Near-duplicate index bound (grebe.media.dedup): 25,000 videos of 8 frames, ~37 MB,
#: ~0.15 ms a query. Here, not in dedup.py, so reading the config imports no numpy/PIL.
DEFAULT_DEDUP_MAX_ENTRIES = 200_000


class FetchConfig(Section):
    """Limits for fetching untrusted media URLs."""

    max_bytes: int = Field(default=64 * 1024 * 1024, ge=1)
    timeout_s: float = Field(default=30.0, gt=0)  # total, all redirect hops included
    connect_timeout_s: float = Field(default=5.0, gt=0)
    max_redirects: int = Field(default=5, ge=0)
    user_agent: str = "grebe-media/0.1"
    # Local paths (and file:// URLs) are refused unless enabled, and then only under these roots.
    allow_files: bool = False
    file_roots: list[Path] = Field(default_factory=list)


class ImageConfig(Section):
    max_pixels: int = Field(default=40_000_000, ge=1)  # decompression-bomb guard (header check)
    # Bytes the decoded image holds (pixels x bytes per pixel as Pillow stores them), also
    # from the header: 40M pixels of RGBA would otherwise be 160 MB, and more in copies.
    max_decoded_bytes: int = Field(default=128 * 1024 * 1024, ge=1)
    view_max_side: int = Field(default=1024, ge=16)  # the decoded view models and OCR see


class VideoConfig(Section):
    """Video decoding runs in a child process (address-space limit, timeouts) after the
    container's metadata passed the frame caps; see grebe.media.video_sandbox."""

    frames: int = Field(default=8, ge=1)  # evenly spaced frames sampled per video
    frame_max_side: int = Field(default=512, ge=16)  # frames are scaled down to bound memory
    max_duration_s: float = Field(default=3600.0, gt=0)
    # Bomb guards, checked from the container's stream metadata before any decoding:
    max_frame_pixels: int = Field(default=7680 * 4320, ge=1)  # width x height (8K UHD)
    # One decoded frame. The metadata check does not know the pixel format, so it
    # counts 8 bytes a pixel (16-bit RGBA): the default lets 8K UHD through at worst.
    max_frame_bytes: int = Field(default=256 * 1024 * 1024, ge=1)
    max_frames: int = Field(default=216_000, ge=1)  # an hour at 60 fps
    # The decoding child: its address-space limit (RLIMIT_AS), the time it may take to
    # start, open and vet the container, and the time for the whole decode.
    decode_memory_mb: int = Field(default=1024, ge=256)
    probe_timeout_s: float = Field(default=10.0, gt=0)
    decode_timeout_s: float = Field(default=60.0, gt=0)
    ffmpeg_timeout_s: float = Field(default=60.0, gt=0)
    max_audio_s: float = Field(default=600.0, gt=0)  # audio beyond this is not transcribed


class ASRConfig(Section):
    workers: int = Field(default=1, ge=1)  # worker processes, one model each
    model_path: Path | None = None  # a CTranslate2 Whisper dir; default: packaged tiny.en
    compute_type: str = "int8"
    # Per worker; 0: CTranslate2's default (4). One: the worker shares the cores with the
    # decode and classify stages, and idle OpenMP threads spin: 698 -> 596 ms CPU per
    # speech clip of the media bench (bench/media_profile.py, docs/media.md).
    cpu_threads: int = Field(default=1, ge=0)
    beam_size: int = Field(default=1, ge=1)
    language: str | None = None  # None: detect (multilingual models)
    timeout_s: float = Field(default=120.0, gt=0)
    cache_ttl_s: float = Field(default=3600.0, gt=0)
    cache_size: int = Field(default=4096, ge=1)
    drain_window_s: float = Field(default=20.0, ge=0)
    # Streaming: ffmpeg reads http(s) media itself (through the SSRF-checking loopback
    # proxy), audio only, capped by `video.max_audio_s` and by `timeout_s` (wall clock,
    # streaming and transcribing together), fed to the model `chunk_s` at a time.
    streaming: bool = True
    chunk_s: float = Field(default=60.0, ge=1.0)
    stream_read_timeout_s: float = Field(default=15.0, gt=0)  # a silent connection
    reconnect_delay_max_s: int = Field(default=5, ge=0)  # ffmpeg's reconnect back-off


class DedupConfig(Section):
    hash: Literal["phash", "dhash"] = "phash"
    max_distance: int = Field(default=10, ge=0, le=64)  # Hamming bits of a 64-bit hash
    # Hashes kept (a video adds one per sampled frame); the oldest are forgotten, so an
    # engine that runs for months holds ~37 MB (192 B a hash) and no more.
    max_entries: int = Field(default=DEFAULT_DEDUP_MAX_ENTRIES, ge=1)


class PipelineConfig(Section):
    download_workers: int = Field(default=4, ge=1)
    decode_workers: int = Field(default=2, ge=1)
    classify_workers: int = Field(default=2, ge=1)
    dedup_workers: int = Field(default=1, ge=1)
    ocr: bool = True
    nsfw: bool = True
    asr: bool = True
    # A post naming more media than this has the rest reported as unchecked (never
    # fetched): one post must not occupy every download worker for minutes.
    max_items_per_post: int = Field(default=16, ge=1)


class MediaConfig(Section):
    fetch: FetchConfig = FetchConfig()
    image: ImageConfig = ImageConfig()
    video: VideoConfig = VideoConfig()
    asr: ASRConfig = ASRConfig()
    dedup: DedupConfig = DedupConfig()
    pipeline: PipelineConfig = PipelineConfig()
