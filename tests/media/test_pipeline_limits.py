"""Per-post media cap and cancellation of a post's media jobs when its caller gives up
(issue 9: a post with 5,000 URLs was accepted whole; a caller that gave up at 2 s with
8 of 40 fetched still had all 40 fetched)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from grebe.media.config import FetchConfig, MediaConfig, PipelineConfig
from grebe.media.fetch import MediaFetcher
from grebe.media.pipeline import MediaPipeline
from grebe.types import Media, Post

SLOW_S = 0.5  # each response of the slow server takes this long


class SlowServer:
    """Answers every GET after SLOW_S with a tiny PNG header; counts requests started."""

    def __init__(self) -> None:
        self.hits = 0
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with owner._lock:
                    owner.hits += 1
                time.sleep(SLOW_S)
                body = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()


@pytest.fixture
def slow_server() -> Iterator[SlowServer]:
    served = SlowServer()
    yield served
    served.server.shutdown()
    served.server.server_close()


def local_fetcher() -> MediaFetcher:
    async def resolve(host: str, port: int) -> list:
        return [ipaddress.ip_address("127.0.0.1")]

    return MediaFetcher(FetchConfig(), resolver=resolve, allow_networks=["127.0.0.1/32"])


def _files(path: Path) -> list[Path]:
    return list(path.iterdir())


def _post(urls: list[str]) -> Post:
    return Post(id="p1", author_id="u1", media=tuple(Media(kind="image", url=u) for u in urls))


async def test_items_over_the_per_post_cap_are_unchecked_not_fetched(tmp_path: Path) -> None:
    pipeline = MediaPipeline(MediaConfig(pipeline=PipelineConfig(asr=False)), work_root=tmp_path)
    await pipeline.start()
    try:
        urls = [f"http://10.0.{i // 250}.{i % 250}/{i}.png" for i in range(5000)]
        report = await pipeline.hydrate(_post(urls))
    finally:
        await pipeline.stop()
    cap = MediaConfig().pipeline.max_items_per_post
    assert cap == 16
    assert [i.url for i in report.items] == urls[:cap]
    assert report.over_cap == 5000 - cap
    assert pipeline.stats()["download"]["processed"] == cap
    assert len(report.unchecked) == cap + 1
    assert report.unchecked[-1] == (
        "4984 more media item(s) not fetched: over the cap of 16 per post")


async def test_giving_up_cancels_the_posts_media_jobs(slow_server: SlowServer,
                                                      tmp_path: Path) -> None:
    config = MediaConfig(pipeline=PipelineConfig(asr=False, max_items_per_post=64))
    pipeline = MediaPipeline(config, fetcher=local_fetcher(), work_root=tmp_path)
    await pipeline.start()
    urls = [f"http://cdn.example:{slow_server.port}/{i}.png" for i in range(40)]
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(pipeline.hydrate(_post(urls)), timeout=2 * SLOW_S)
        # Every job ends promptly (skipped or cancelled), leaving no work and no files.
        async with asyncio.timeout(10):
            while pipeline._jobs:  # noqa: ASYNC110  # the job set has no event
                await asyncio.sleep(0.05)
        started = slow_server.hits
        # 4 download workers over ~2 rounds of SLOW_S; all 40 would take 5 s.
        assert started <= 3 * config.pipeline.download_workers, started
        assert _files(tmp_path) == []
        # The pipeline still serves the next post.
        await pipeline.submit("p2", urls[0])
        assert slow_server.hits == started + 1
    finally:
        await pipeline.stop()


def test_a_job_cancelled_while_its_directory_is_made_leaves_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-item directory belongs to the job the moment it exists: a caller giving
    up (plan timeout, a scan's --max-seconds) while it was being made left an empty
    `grebe-media-*` behind, one per such job (seen after capped scans)."""
    work = tmp_path / "work"
    work.mkdir()
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    making, made = threading.Event(), threading.Event()
    real_mkdtemp = tempfile.mkdtemp

    def slow_mkdtemp(*args: object, **kwargs: object) -> str:
        making.set()
        time.sleep(0.3)  # a slow disk: long enough for the caller to give up meanwhile
        try:
            return real_mkdtemp(*args, **kwargs)  # type: ignore[call-overload, no-any-return]
        finally:
            made.set()

    monkeypatch.setattr(tempfile, "mkdtemp", slow_mkdtemp)
    config = MediaConfig(fetch=FetchConfig(allow_files=True, file_roots=[tmp_path]),
                         pipeline=PipelineConfig(asr=False, nsfw=False, ocr=False))

    async def go() -> None:
        pipeline = MediaPipeline(config, work_root=work)
        await pipeline.start()
        job = asyncio.create_task(pipeline.submit("p", str(photo)))
        await asyncio.to_thread(making.wait, 10)
        job.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await job
        await asyncio.to_thread(made.wait, 10)
        await pipeline.stop()

    asyncio.run(go())
    assert list(work.iterdir()) == []
