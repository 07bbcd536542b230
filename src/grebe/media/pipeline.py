"""The staged media pipeline: download -> decode -> classify -> dedup.

Each stage has its own workers and a bounded queue in front of it (about twice its
worker count), so a slow stage pushes back on the one before it instead of piling up
work; `submit()` itself waits when the download queue is full. Stages hand each other
file paths in a per-item temporary directory (the download, the upright RGB view of
an image, the sampled video frames), never bytes, and the directory is removed when
the item finishes, whatever happened to it. A fatal problem (unsafe URL, too large,
corrupt file) ends the item with `error`; a failing model only adds a warning.

`hydrate(post)` serves plans; `scan(urls)` serves the batch command.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from grebe.core.deadlines import WaitLedger, payload_waits, queue_begins, queue_ends
from grebe.errors import GrebeError, MediaError
from grebe.inference.base import OCR, ImageClassifier, Service
from grebe.inference.nsfw import NSFW as NSFW_LABEL  # the score read from the classifier
from grebe.media.asr import ASRErrorCode, ASRProcessor
from grebe.media.config import MediaConfig
from grebe.media.dedup import HashEntry, NearDuplicateIndex, perceptual_hash
from grebe.media.fetch import FetchedMedia, MediaFetcher
from grebe.media.image import decode_image
from grebe.media.metrics import MediaMetrics, StageStats
from grebe.media.reports import (
    KIND_AUDIO,
    KIND_IMAGE,
    KIND_VIDEO,
    WARN_NSFW,
    WARN_OCR,
    DuplicateRef,
    ItemReport,
    MediaReport,
)
from grebe.media.video_sandbox import FRAME_FORMAT, FRAME_SUFFIX, decode_video
from grebe.types import Post

log = logging.getLogger(__name__)

DOWNLOAD, DECODE, CLASSIFY, DEDUP = "download", "decode", "classify", "dedup"
STAGES = (DOWNLOAD, DECODE, CLASSIFY, DEDUP)
# A step inside classify (concurrent with NSFW and OCR), timed on its own: speech is the
# slowest model by far, and the classify figure alone cannot say whether it is the cause.
TRANSCRIBE = "transcribe"
NO_ASR = "no_asr_configured"  # transcript_error of speech that was not transcribed
STOPPED = "pipeline stopped before the item finished"  # error of an item stop() abandoned
WORK_PREFIX = "grebe-media-"  # each item's temporary directory
#: Jobs let into the download stage at once, per download worker: in flight or queued
DOWNLOAD_ROOM_PER_WORKER = 2


@dataclass(eq=False)
class _Job:
    report: ItemReport
    future: asyncio.Future[ItemReport]
    started: float = field(default_factory=time.monotonic)
    workdir: Path | None = None
    fetched: FetchedMedia | None = None
    views: list[Path] = field(default_factory=list)  # image view or video frames
    has_audio: bool = False
    cancelled: bool = False  # its caller gave up: skip it, or cancel the stage running it
    # Its payload's ledger (grebe.core.deadlines): time queued for a stage is waiting,
    # not running, so it does not count against the media task's time limit.
    ledger: WaitLedger | None = None
    queued: bool = False
    step: asyncio.Future[None] | None = None  # the stage handler running it, if any


class MediaPipeline:
    """Bounded, staged media processing with per-stage stats.

    Models are injected (any grebe.inference ImageClassifier / OCR, an ASRProcessor),
    so tests use real or fake ones alike; a missing one just leaves its field empty.
    start() starts them (idempotent); stopping them is left to their owner."""

    def __init__(
        self,
        config: MediaConfig | None = None,
        *,
        fetcher: MediaFetcher | None = None,
        nsfw: ImageClassifier | None = None,
        ocr: OCR | None = None,
        asr: ASRProcessor | None = None,
        index: NearDuplicateIndex | None = None,
        metrics: MediaMetrics | None = None,
        work_root: Path | None = None,
    ) -> None:
        self.config = config or MediaConfig()
        self.fetcher = fetcher or MediaFetcher(self.config.fetch)
        p = self.config.pipeline
        self.nsfw = nsfw if p.nsfw else None
        self.ocr = ocr if p.ocr else None
        self.asr = asr if p.asr else None
        # `is None`, not `or`: an empty index is falsy (len 0), and a shared one starts empty
        self.index = index if index is not None else NearDuplicateIndex(
            self.config.dedup.max_entries)
        self._metrics = metrics
        self._work_root = work_root
        self._workers = {DOWNLOAD: p.download_workers, DECODE: p.decode_workers,
                         CLASSIFY: p.classify_workers, DEDUP: p.dedup_workers}
        self._stats = {stage: StageStats(workers=n) for stage, n in self._workers.items()}
        self._stats[TRANSCRIBE] = StageStats(workers=p.classify_workers)
        self._queues: dict[str, asyncio.Queue[_Job]] = {}
        # Room in the download stage, handed out first come, first served. A bounded
        # asyncio.Queue is not fair: a caller arriving while a woken waiter has not run
        # yet takes its slot, and the waiter queues again at the back, so under a steady
        # stream the earliest posts starved until their time limit (316 of 1,000 videos
        # dead-lettered, docs/benchmarks.md "Media at volume"). asyncio.Semaphore hands a
        # released slot to its first waiter.
        self._download_room: asyncio.Semaphore | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._jobs: set[_Job] = set()
        self._running = False

    # --- lifecycle ---

    async def start(self) -> None:
        if self._running:
            return
        for service in (self.nsfw, self.ocr, self.asr):
            if isinstance(service, Service):
                await service.start()
        handlers: dict[str, Callable[[_Job], Awaitable[None]]] = {
            DOWNLOAD: self._download, DECODE: self._decode,
            CLASSIFY: self._classify, DEDUP: self._dedup,
        }
        self._download_room = asyncio.Semaphore(DOWNLOAD_ROOM_PER_WORKER * self._workers[DOWNLOAD])
        # the download queue holds only jobs let in by `_download_room`
        self._queues = {s: asyncio.Queue(maxsize=0 if s == DOWNLOAD else 2 * self._workers[s])
                        for s in STAGES}
        for i, stage in enumerate(STAGES):
            following = STAGES[i + 1] if i + 1 < len(STAGES) else None
            for n in range(self._workers[stage]):
                self._tasks.append(asyncio.create_task(
                    self._run_stage(stage, handlers[stage], following), name=f"{stage}-{n}"))
        self._running = True

    async def stop(self, drain_window_s: float = 20.0) -> int:
        """Stop intake, let items in flight finish within the window, then cancel the
        stage workers. Returns how many items were abandoned (their callers get a
        report with `error`, and their temporary files are removed)."""
        self._running = False
        pending = [job.future for job in self._jobs if not job.future.done()]
        if pending and drain_window_s > 0:
            await asyncio.wait(pending, timeout=drain_window_s)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        abandoned = [job for job in self._jobs if not job.future.done()]
        for job in abandoned:
            job.report.error = STOPPED
            await self._finish(job)
        return len(abandoned)

    # --- entry points ---

    async def submit(self, post_id: str, url: str) -> ItemReport:
        """Process one media URL of one post; waits for room in the download queue."""
        if not self._running:
            raise MediaError("the media pipeline is not running")
        job = _Job(report=ItemReport(post_id=post_id, url=url),
                   future=asyncio.get_running_loop().create_future(),
                   ledger=payload_waits.get())
        self._jobs.add(job)
        queue_begins(job)
        # Wait for room, unless stop() abandons the job first (then the put never lands).
        put = asyncio.ensure_future(self._let_in(job))
        try:
            await asyncio.wait((put, job.future), return_when=asyncio.FIRST_COMPLETED)
            if not put.done():
                put.cancel()
            self._observe_depth(DOWNLOAD)
            # Shielded: the job's own cleanup (its files) runs whatever the caller does.
            return await asyncio.shield(job.future)
        except asyncio.CancelledError:
            # The caller gave up (plan timeout, deadline, shutdown): the work is wanted by
            # nobody, so it stops — a queued job is skipped, a running stage cancelled.
            if not put.done():
                put.cancel()
                await self._finish(job)
            self._abandon(job)
            raise

    async def _let_in(self, job: _Job) -> None:
        """Queue the job for download once the download stage has room (in turn)."""
        assert self._download_room is not None
        await self._download_room.acquire()
        self._queues[DOWNLOAD].put_nowait(job)

    def _abandon(self, job: _Job) -> None:
        job.cancelled = True
        if job.step is not None and not job.step.done():
            job.step.cancel()

    async def hydrate(self, post: Post) -> MediaReport:
        """The post's media items, up to `pipeline.max_items_per_post`, processed
        concurrently; the rest are counted in the report as unchecked, never fetched.
        Cancelling this cancels the items' jobs."""
        cap = self.config.pipeline.max_items_per_post
        items = await asyncio.gather(*(self.submit(post.id, m.url) for m in post.media[:cap]))
        return MediaReport(post_id=post.id, items=list(items),
                           nsfw_model=self.nsfw.name if self.nsfw else "",
                           over_cap=max(0, len(post.media) - cap), max_items=cap)

    async def scan(
        self,
        urls: Sequence[tuple[str, str]],
        on_done: Callable[[ItemReport], None] | None = None,
    ) -> list[ItemReport]:
        """(post id, url) pairs -> reports in input order; `on_done` as each finishes."""

        async def one(post_id: str, url: str) -> ItemReport:
            report = await self.submit(post_id, url)
            if on_done is not None:
                on_done(report)
            return report

        return list(await asyncio.gather(*(one(p, u) for p, u in urls)))

    def stats(self) -> dict[str, dict[str, float | int]]:
        """Per stage, plus `transcribe` (a step of classify: its queue is classify's)."""
        for stage, queue in self._queues.items():
            self._stats[stage].observe_depth(queue.qsize())
        return {stage: self._stats[stage].snapshot() for stage in (*STAGES, TRANSCRIBE)}

    # --- stage machinery ---

    async def _run_stage(
        self, stage: str, handler: Callable[[_Job], Awaitable[None]], following: str | None
    ) -> None:
        queue, stats = self._queues[stage], self._stats[stage]
        while True:
            job = await queue.get()
            queue_ends(job)
            if stage == DOWNLOAD and self._download_room is not None:
                self._download_room.release()  # room for the next in line
            self._observe_depth(stage)
            if job.cancelled:  # its caller gave up while it waited: nothing to do
                await self._finish(job)
                queue.task_done()
                continue
            started = time.monotonic()
            ok = True
            job.step = asyncio.ensure_future(handler(job))
            try:
                await asyncio.wait((job.step,))
            except asyncio.CancelledError:  # this worker is being stopped
                job.step.cancel()
                raise
            try:
                job.step.result()
            except asyncio.CancelledError:
                ok, job.report.error = False, f"{stage} cancelled: the caller gave up"
            except GrebeError as exc:
                ok, job.report.error = False, str(exc)
            except Exception as exc:  # a bug or a library surprise: the item fails, not us
                log.exception("media %s stage failed on %s", stage, job.report.url)
                ok, job.report.error = False, f"{stage} failed: {type(exc).__name__}: {exc}"
            job.step = None
            elapsed = time.monotonic() - started
            stats.record(elapsed, ok)
            if self._metrics is not None:
                self._metrics.finished(stage, elapsed, ok)
            if ok and following is not None and not job.cancelled:
                queue_begins(job)
                await self._queues[following].put(job)  # backpressure: waits for room
                self._observe_depth(following)
            else:
                await self._finish(job)
            queue.task_done()

    def _observe_depth(self, stage: str) -> None:
        depth = self._queues[stage].qsize()
        self._stats[stage].observe_depth(depth)
        if self._metrics is not None:
            self._metrics.queue_depth(stage, depth)

    async def _finish(self, job: _Job) -> None:
        queue_ends(job)
        workdir, job.workdir = job.workdir, None
        if workdir is not None:
            await asyncio.to_thread(shutil.rmtree, workdir, True)
        job.report.elapsed_s = time.monotonic() - job.started
        self._jobs.discard(job)
        if not job.future.done():
            job.future.set_result(job.report)

    # --- the stages ---

    async def _download(self, job: _Job) -> None:
        # Once the thread runs, the directory will exist whatever happens to the job, so
        # it is the job's (and removed with it) even when the caller gives up meanwhile;
        # awaited unshielded, a cancellation here left it behind, empty, for good.
        making = asyncio.ensure_future(asyncio.to_thread(
            tempfile.mkdtemp, prefix=WORK_PREFIX, dir=self._work_root))
        try:
            made = await asyncio.shield(making)
        except asyncio.CancelledError:
            with contextlib.suppress(OSError):
                job.workdir = Path(await making)
            raise
        job.workdir = Path(made)
        fetched = await self.fetcher.fetch(job.report.url, job.workdir)
        job.fetched = fetched
        job.report.kind, job.report.content_type = fetched.kind, fetched.content_type
        job.report.size = fetched.size

    async def _decode(self, job: _Job) -> None:
        assert job.fetched is not None and job.workdir is not None
        if job.fetched.kind == KIND_IMAGE:
            await asyncio.to_thread(self._decode_image, job)
        else:
            await self._decode_timed_media(job)

    def _decode_image(self, job: _Job) -> None:
        assert job.fetched is not None and job.workdir is not None
        cfg = self.config.image
        decoded = decode_image(job.fetched.path, max_pixels=cfg.max_pixels,
                               max_side=cfg.view_max_side,
                               max_decoded_bytes=cfg.max_decoded_bytes)
        view = job.workdir / f"view{FRAME_SUFFIX}"
        Image.fromarray(decoded.rgb).save(view, format=FRAME_FORMAT)
        job.views = [view]
        job.report.width, job.report.height = decoded.width, decoded.height

    async def _decode_timed_media(self, job: _Job) -> None:
        """Video and audio are vetted and decoded in a child process (memory limit,
        timeouts; cancelled with the job), never in this one."""
        assert job.fetched is not None and job.workdir is not None
        info = await decode_video(job.fetched.path, job.workdir, self.config.video)
        job.report.duration_s = info.duration_s
        job.report.width, job.report.height = info.width, info.height
        job.has_audio = info.has_audio
        if info.has_video:
            job.views = list(info.frames)
            job.report.frames = len(info.frames)
            job.report.kind = KIND_VIDEO
        else:
            job.report.kind = KIND_AUDIO

    async def _classify(self, job: _Job) -> None:
        await asyncio.gather(self._score_nsfw(job), self._read_text(job), self._transcribe(job))

    async def _score_nsfw(self, job: _Job) -> None:
        if self.nsfw is None or not job.views:
            return
        try:
            scores = await self.nsfw.classify_images([str(p) for p in job.views])
        except GrebeError as exc:
            job.report.warnings.append(f"{WARN_NSFW}: {exc}")
            return
        job.report.nsfw = [float(s.get(NSFW_LABEL, 0.0)) for s in scores]

    async def _read_text(self, job: _Job) -> None:
        if self.ocr is None or not job.views:
            return
        # Images: the whole view. Videos: the middle frame (captions, burnt-in text).
        view = job.views[len(job.views) // 2]
        try:
            job.report.ocr_text = (await self.ocr.read_text(str(view))).strip()
        except GrebeError as exc:
            job.report.warnings.append(f"{WARN_OCR}: {exc}")

    async def _transcribe(self, job: _Job) -> None:
        if job.report.kind not in (KIND_VIDEO, KIND_AUDIO):
            return
        if not job.has_audio:
            job.report.transcript_error = ASRErrorCode.NO_AUDIO_STREAM.value
            return
        if self.asr is None:  # the speech is there and nobody listened: unchecked
            job.report.transcript_error = NO_ASR
            return
        assert job.fetched is not None
        # Keyed by URL: the same video reposted by many posts is transcribed once.
        url = job.report.url
        started = time.monotonic()
        if self.config.asr.streaming and url.lower().startswith(("http://", "https://")):
            result = await self.asr.transcribe_url(url, url, self.fetcher)
        else:
            result = await self.asr.transcribe(url, job.fetched.path)
        elapsed = time.monotonic() - started
        self._stats[TRANSCRIBE].record(elapsed, result.error is None)
        if self._metrics is not None:
            self._metrics.finished(TRANSCRIBE, elapsed, result.error is None)
        job.report.transcript = result.text
        job.report.transcript_language = result.language
        job.report.transcript_capped = result.capped
        if result.error is not None:
            job.report.transcript_error = result.error.value
            job.report.transcript_detail = result.detail

    async def _dedup(self, job: _Job) -> None:
        if not job.views:
            return
        kind = self.config.dedup.hash
        hashes = await asyncio.to_thread(_hash_files, job.views, kind)
        best: dict[tuple[str, str], int] = {}
        for frame, value in enumerate(hashes):
            entry = HashEntry(post_id=job.report.post_id, media_key=job.report.url, hash=value,
                              frame=frame if job.report.kind == KIND_VIDEO else None)
            for match in self.index.add_and_match(entry, self.config.dedup.max_distance):
                key = (match.entry.post_id, match.entry.media_key)
                best[key] = min(best.get(key, 64), match.distance)
        job.report.duplicates = sorted(
            (DuplicateRef(post_id=p, url=u, distance=d) for (p, u), d in best.items()),
            key=lambda ref: (ref.distance, ref.post_id, ref.url))


def _hash_files(paths: Iterable[Path], kind: Any) -> list[int]:
    out = []
    for path in paths:
        with Image.open(path) as image:
            out.append(perceptual_hash(image.convert("RGB"), kind))
    return out

