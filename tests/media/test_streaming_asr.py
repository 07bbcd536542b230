"""Streaming ASR: ffmpeg reads the URL through the SSRF-checking loopback proxy, audio
only, capped by duration; real ffmpeg, a real HTTP server with range support on
127.0.0.1, real Whisper tiny.en on a 20-minute video."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import os
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from tests.media.conftest import start_http_server

from grebe.inference.fakes import ConstantImageClassifier, FixedTranscriber
from grebe.inference.whisper import WhisperTranscriber
from grebe.media.asr import ASRErrorCode, ASRProcessor
from grebe.media.config import ASRConfig, FetchConfig, MediaConfig, VideoConfig
from grebe.media.fetch import IPAddress, MediaFetcher, system_resolver
from grebe.media.pipeline import MediaPipeline
from grebe.media.stream_audio import (
    STREAM_PROTOCOLS,
    PCMStream,
    StreamLimits,
    ffmpeg_stream_args,
)
from grebe.media.stream_proxy import StreamProxy
from grebe.media.video import FFmpegError
from grebe.types import Media, Post

LONG_S = 1200  # the video: 20 minutes
LATE_AT_S = 1140  # where the second voice starts (19 minutes in)
LATE_SCRIPT = "the weather today is sunny and warm with a light breeze from the west"
BECKETT = ("ever", "failed", "better")  # words that survive 16 kb/s AAC
LATE = ("weather", "sunny", "west")
HOST = "media.test"  # resolves to 127.0.0.1, which the test fetcher allows


@pytest.fixture(scope="module")
def long_video(tmp_path_factory: pytest.TempPathFactory, speech_wav: Path, photo: Path) -> Path:
    """20 minutes over a still image: Beckett at 0 s, espeak-ng at 19 min, silence
    between; 64 px wide, 1 fps, 16 kb/s mono audio, so the file is a few MB. The moov
    atom stays at the end, so ffmpeg has to seek (HTTP Range) to read it."""
    if shutil.which("espeak-ng") is None or shutil.which("ffmpeg") is None:
        pytest.fail("espeak-ng and ffmpeg must be installed (apt) for the media tests")
    out = tmp_path_factory.mktemp("long")
    late = out / "late.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "130", "-w", str(late), LATE_SCRIPT],
                   check=True, timeout=30)
    video = out / "long.mp4"
    subprocess.run(
        ["ffmpeg", "-nostdin", "-loglevel", "error", "-y",
         "-loop", "1", "-framerate", "1", "-i", str(photo.parent / "coffee.png"),
         "-i", str(speech_wav), "-i", str(late),
         "-filter_complex",
         f"[1:a]aresample=16000,apad=whole_dur={LATE_AT_S}[a0];[2:a]aresample=16000[a1];"
         f"[a0][a1]concat=n=2:v=0:a=1,apad=whole_dur={LONG_S}[a]",
         "-map", "0:v", "-map", "[a]", "-t", str(LONG_S),
         "-vf", "scale=64:-2", "-c:v", "libx264", "-preset", "ultrafast", "-tune", "stillimage",
         "-pix_fmt", "yuv420p", "-c:a", "aac", "-ac", "1", "-b:a", "16k", str(video)],
        check=True, timeout=120,
    )
    return video


@pytest.fixture(scope="module")
def long_bytes(long_video: Path) -> bytes:
    return long_video.read_bytes()


@pytest.fixture(scope="module")
def warm_bytes(speech_wav: Path) -> bytes:
    """70 s of 16 kHz WAV (Beckett, then silence): more than one 60 s chunk."""
    done = subprocess.run(
        ["ffmpeg", "-nostdin", "-loglevel", "error", "-i", str(speech_wav),
         "-af", "aresample=16000,apad=whole_dur=70", "-ac", "1", "-c:a", "pcm_s16le",
         "-f", "wav", "pipe:1"], check=True, capture_output=True, timeout=60)
    return done.stdout


@pytest.fixture(scope="module")
def speech_bytes(speech_wav: Path) -> bytes:
    return speech_wav.read_bytes()


@dataclass
class RangeServed:
    files: dict[str, bytes] = field(default_factory=dict)
    redirects: dict[str, str] = field(default_factory=dict)
    hits: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range)
    honour_ranges: bool = True  # False: a server that always sends the whole body
    once: set[str] = field(default_factory=set)  # paths served once, then 404
    stall: threading.Event = field(default_factory=threading.Event)  # set: stop stalling
    stalled: set[str] = field(default_factory=set)  # paths that send a little, then hang
    # paths whose reads of the data (ranges starting inside the first half, past the
    # header) stop at the half and hang up; only a read from the half on goes through
    cut: set[str] = field(default_factory=set)


def _range_server(host: str = "127.0.0.1") -> tuple[ThreadingHTTPServer, RangeServed]:
    served = RangeServed()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            byte_range = self.headers.get("Range")
            served.hits.append((self.path, byte_range))
            if self.path in served.redirects:
                self.send_response(302)
                self.send_header("Location", served.redirects[self.path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = served.files.get(self.path)
            if self.path in served.once:
                served.files.pop(self.path, None)
            if body is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start, end = 0, len(body) - 1
            match = re.fullmatch(r"bytes=(\d+)-(\d*)", byte_range or "")
            if match and served.honour_ranges:
                start = int(match[1])
                end = min(end, int(match[2])) if match[2] else end
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end}/{len(body)}")
            else:
                self.send_response(200)
            if served.honour_ranges:
                self.send_header("Accept-Ranges", "bytes")
            playlist = self.path.endswith(".m3u8")
            self.send_header("Content-Type",
                             "application/vnd.apple.mpegurl" if playlist else "video/mp4")
            self.send_header("Content-Length", str(end - start + 1))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                if self.path in served.cut and 0 < start < len(body) // 2:
                    self.wfile.write(body[start:len(body) // 2])
                    self.close_connection = True
                    return
                if self.path in served.stalled:
                    self.wfile.write(body[start:start + 4096])
                    self.wfile.flush()
                    served.stall.wait(30)
                    return
                self.wfile.write(body[start:end + 1])

        def log_message(self, *args: object) -> None:
            return None

    return start_http_server(host, Handler), served


@pytest.fixture
def range_server() -> Iterator[tuple[int, RangeServed]]:
    server, served = _range_server()
    yield server.server_address[1], served
    server.shutdown()
    server.server_close()


async def _resolve(host: str, port: int) -> list[IPAddress]:
    assert host == HOST, host
    return [ipaddress.ip_address("127.0.0.1")]


def _fetcher() -> MediaFetcher:
    return MediaFetcher(FetchConfig(), resolver=_resolve, allow_networks=["127.0.0.1/32"])


def _vm_kib(pid: int, field_name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field_name} missing for pid {pid}")


def test_ffmpeg_gets_an_argument_list_with_the_caps() -> None:
    limits = StreamLimits(max_audio_s=90, chunk_s=30, timeout_s=60, read_timeout_s=7,
                          reconnect_delay_max_s=3)
    args = ffmpeg_stream_args("http://127.0.0.1:1/x", limits)
    pairs = dict(itertools.pairwise(args))
    assert pairs["-t"] == "90" and pairs["-protocol_whitelist"] == STREAM_PROTOCOLS == "http,tcp"
    assert pairs["-reconnect"] == "1" and pairs["-reconnect_streamed"] == "1"
    assert pairs["-reconnect_delay_max"] == "3" and pairs["-rw_timeout"] == "7000000"
    assert pairs["-max_redirects"] == "0" and "hls" not in pairs["-format_whitelist"]
    assert pairs["-map"] == "0:a:0" and args[-1] == "pipe:1"


@pytest.mark.slow
async def test_twenty_minute_video_streamed_in_a_worker_with_bounded_memory(
    long_bytes: bytes, warm_bytes: bytes, range_server: tuple[int, RangeServed]
) -> None:
    port, served = range_server
    served.files["/long.mp4"] = long_bytes
    served.files["/warm.wav"] = warm_bytes
    asr = ASRProcessor(ASRConfig(workers=1, timeout_s=300, chunk_s=60),
                       VideoConfig(max_audio_s=LONG_S + 60))
    await asr.start()
    try:
        assert asr._pool is not None
        (pid,) = [p.pid for p in asr._pool._processes.values()]  # type: ignore[attr-defined]
        # A 70 s clip first: the peak after it holds the model, the VAD, the decoder
        # and one full chunk's buffers: everything that does not grow with the length.
        warm = await asr.transcribe_url("warm", f"http://{HOST}:{port}/warm.wav",
                                        _fetcher())
        warm_kib = _vm_kib(pid, "VmHWM")
        result = await asr.transcribe_url("long", f"http://{HOST}:{port}/long.mp4", _fetcher())
        peak_kib = _vm_kib(pid, "VmHWM")
        # Two more passes (an hour of audio in all): what grows with length shows here.
        again = [await asr.transcribe_url(f"again-{n}", f"http://{HOST}:{port}/long.mp4",
                                          _fetcher()) for n in range(2)]
        hour_kib = _vm_kib(pid, "VmHWM")
        print(f"worker peak RSS: {warm_kib / 1024:.0f} MiB after a 70 s clip, "
              f"{peak_kib / 1024:.0f} MiB after 20 min, {hour_kib / 1024:.0f} MiB after "
              f"60 min; {result.elapsed_s:.1f}s for 20 min")
    finally:
        assert await asr.stop() == 0
    assert warm.ok and not warm.capped and abs(warm.audio_s - 70) < 0.1, warm
    assert result.ok, result.detail
    words = result.text.lower()
    assert all(w in words for w in BECKETT), result.text
    assert all(w in words for w in LATE), result.text  # 19 minutes in
    assert not result.capped and abs(result.audio_s - LONG_S) < 2, result.audio_s
    assert all(r.ok and r.text == result.text for r in again), again
    # Bounded by the chunk, not the video. Measured over several runs: 297 MiB after the
    # 70 s clip; 316-352 after 20 minutes and 339-363 after an hour (a one-off rise,
    # allocator arenas and decoder caches, landing in one pass or another). Asserted: an
    # hour of audio adds under 128 MiB. The whole-file path on the same 20-minute video
    # peaks at 608 MiB (+326 MiB: the whole audio as float32, and its features), and
    # grows with the length.
    assert hour_kib - warm_kib < 128 * 1024, (warm_kib, peak_kib, hour_kib)
    # ffmpeg read the file by ranges through the proxy (the moov atom is at the end).
    assert any(r not in (None, "bytes=0-") for _, r in served.hits), served.hits


@pytest.mark.slow
async def test_cap_smaller_than_the_video_transcribes_only_the_start(
    long_bytes: bytes, range_server: tuple[int, RangeServed]
) -> None:
    """In process (an injected Transcriber fed one WAV per chunk), capped at 2 minutes."""
    port, served = range_server
    served.files["/long.mp4"] = long_bytes
    whisper = WhisperTranscriber(beam_size=1, vad=True)
    await whisper.start()
    asr = ASRProcessor(ASRConfig(timeout_s=120, chunk_s=30), VideoConfig(max_audio_s=120),
                       transcriber=whisper)
    await asr.start()
    try:
        result = await asr.transcribe_url("capped", f"http://{HOST}:{port}/long.mp4",
                                          _fetcher())
    finally:
        await asr.stop()
        await whisper.stop()
    assert result.ok, result.detail
    assert result.capped and abs(result.audio_s - 120) < 1, result.audio_s
    words = result.text.lower()
    assert all(w in words for w in BECKETT) and not any(w in words for w in LATE), words


async def test_refused_connection_is_a_fetch_error_with_the_reason() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    asr = ASRProcessor(transcriber=FixedTranscriber("never"))
    await asr.start()
    result = await asr.transcribe_url("x", f"http://{HOST}:{port}/v.mp4", _fetcher())
    await asr.stop()
    assert result.error == ASRErrorCode.FETCH_ERROR
    assert result.detail is not None and "cannot stream" in result.detail, result.detail


async def test_redirect_to_a_private_address_is_refused(
    range_server: tuple[int, RangeServed], secret_server: tuple[str, object]
) -> None:
    port, served = range_server
    secret, secret_served = secret_server
    served.redirects["/v.mp4"] = f"http://{secret}/latest/meta-data"
    asr = ASRProcessor(transcriber=FixedTranscriber("never"))
    await asr.start()
    result = await asr.transcribe_url("r", f"http://{HOST}:{port}/v.mp4", _fetcher())
    await asr.stop()
    assert result.error == ASRErrorCode.UNSAFE_URL, result
    assert result.detail is not None and "loopback" in result.detail, result.detail
    assert served.hits and served.hits[0][0] == "/v.mp4"
    assert secret_served.hits == []  # type: ignore[attr-defined]


async def test_unsafe_url_is_refused_before_ffmpeg_runs(
    range_server: tuple[int, RangeServed]
) -> None:
    port, served = range_server
    asr = ASRProcessor(transcriber=FixedTranscriber("never"))
    await asr.start()
    result = await asr.transcribe_url("u", f"http://127.0.0.1:{port}/v.mp4", MediaFetcher())
    bad_scheme = await asr.transcribe_url("f", "file:///etc/passwd", MediaFetcher())
    await asr.stop()
    assert result.error == ASRErrorCode.UNSAFE_URL and "loopback" in (result.detail or "")
    assert bad_scheme.error == ASRErrorCode.UNSAFE_URL
    assert served.hits == []


async def test_a_server_without_range_support_still_streams_an_mp4_with_moov_last(
    bunny: Path, range_server: tuple[int, RangeServed]
) -> None:
    """bigbuckbunny.mp4 has its moov atom at the end: ffmpeg must seek, and the proxy
    answers the seeks of a server that ignores Range by skipping to the offset."""
    port, served = range_server
    served.files["/bunny.mp4"] = await asyncio.to_thread(bunny.read_bytes)
    served.honour_ranges = False
    fake = FixedTranscriber("hello world")
    asr = ASRProcessor(transcriber=fake)
    await asr.start()
    result = await asr.transcribe_url("b", f"http://{HOST}:{port}/bunny.mp4", _fetcher())
    await asr.stop()
    assert result.ok, result.detail
    assert result.text == "hello world" and abs(result.audio_s - 5.3) < 0.2, result
    assert len(served.hits) > 1 and any(r not in (None, "bytes=0-") for _, r in served.hits)


async def test_speech_that_cannot_be_streamed_leaves_the_item_unchecked_with_the_reason(
    bunny: Path, range_server: tuple[int, RangeServed], tmp_path: Path
) -> None:
    """The download for frames succeeds, the audio stream then gets a 404: the item is
    reported unchecked (flows label it media_unchecked) and the reason says why."""
    port, served = range_server
    served.files["/once.mp4"] = await asyncio.to_thread(bunny.read_bytes)
    served.once.add("/once.mp4")
    config = MediaConfig(video=VideoConfig(frames=2, frame_max_side=64))
    pipeline = MediaPipeline(
        config, fetcher=_fetcher(), work_root=tmp_path,
        nsfw=ConstantImageClassifier({"nsfw": 0.1, "sfw": 0.9}, name="fake-nsfw"),
        asr=ASRProcessor(config.asr, config.video, transcriber=FixedTranscriber("never")))
    await pipeline.start()
    url = f"http://{HOST}:{port}/once.mp4"
    report = await pipeline.hydrate(Post(id="p", author_id="u", media=(
        Media(kind="video", url=url),)))
    await pipeline.stop()
    assert pipeline.asr is not None
    await pipeline.asr.stop()
    (item,) = report.items
    assert item.error is None and item.transcript == ""
    assert item.transcript_error == ASRErrorCode.FETCH_ERROR
    assert report.unchecked == (
        f"{url}: speech not transcribed (fetch_error: HTTP 404 fetching {url})",)


async def test_a_stalled_stream_is_stopped_at_the_wall_clock(
    long_bytes: bytes, range_server: tuple[int, RangeServed]
) -> None:
    """The server sends 4 KiB and hangs: ffmpeg is killed at `asr.timeout_s` (here 2 s,
    with the per-read timeout far longer) and the result says so."""
    port, served = range_server
    served.files["/stall.mp4"] = long_bytes
    served.stalled.add("/stall.mp4")
    asr = ASRProcessor(ASRConfig(timeout_s=2, stream_read_timeout_s=60),
                       transcriber=FixedTranscriber("never"))
    await asr.start()
    try:
        result = await asr.transcribe_url("s", f"http://{HOST}:{port}/stall.mp4", _fetcher())
    finally:
        served.stall.set()
        await asr.stop()
    assert result.error == ASRErrorCode.FFMPEG_TIMEOUT, result
    assert "longer than 2s" in (result.detail or "") and result.elapsed_s < 10, result


def test_ffmpeg_itself_follows_no_redirect(range_server: tuple[int, RangeServed],
                                           speech_bytes: bytes) -> None:
    """Defence in depth: even pointed straight at a redirect (the proxy never passes one
    on), ffmpeg does not follow it, and it cannot open an HLS playlist's URLs."""
    port, served = range_server
    served.files["/speech.wav"] = speech_bytes
    served.redirects["/hop"] = f"http://127.0.0.1:{port}/speech.wav"
    served.files["/list.m3u8"] = (f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n"
                                  f"http://127.0.0.1:{port}/speech.wav\n#EXT-X-ENDLIST\n"
                                  ).encode()
    limits = StreamLimits(max_audio_s=30, chunk_s=30, timeout_s=20, read_timeout_s=5,
                          reconnect_delay_max_s=0)
    for path in ("/hop", "/list.m3u8"):
        with pytest.raises(FFmpegError), PCMStream(f"http://127.0.0.1:{port}{path}",
                                                   limits) as stream:
            list(stream)
    assert [p for p, _ in served.hits].count("/speech.wav") == 0
    with PCMStream(f"http://127.0.0.1:{port}/speech.wav", limits) as stream:
        assert abs(sum(len(c) for c in stream) - 159_360) < 1600  # the control case works


async def test_the_pipeline_streams_http_media_and_reports_a_capped_transcript(
    bunny: Path, range_server: tuple[int, RangeServed], tmp_path: Path
) -> None:
    """media.asr.streaming (the default): the transcript comes from the stream (a second
    request for the URL after the download), cut at video.max_audio_s and marked so."""
    port, served = range_server
    served.files["/bunny.mp4"] = await asyncio.to_thread(bunny.read_bytes)
    config = MediaConfig(video=VideoConfig(frames=2, frame_max_side=64, max_audio_s=2))
    assert config.asr.streaming
    fake = FixedTranscriber("hello world")
    pipeline = MediaPipeline(
        config, fetcher=_fetcher(), work_root=tmp_path,
        nsfw=ConstantImageClassifier({"nsfw": 0.1, "sfw": 0.9}, name="fake-nsfw"),
        asr=ASRProcessor(config.asr, config.video, transcriber=fake))
    await pipeline.start()
    report = await pipeline.hydrate(Post(id="p", author_id="u", media=(
        Media(kind="video", url=f"http://{HOST}:{port}/bunny.mp4"),)))
    await pipeline.stop()
    assert pipeline.asr is not None
    await pipeline.asr.stop()
    (item,) = report.items
    assert item.transcript == "hello world" and item.transcript_capped, item
    assert report.unchecked == () and len(fake.calls) == 1
    assert len([p for p, _ in served.hits if p == "/bunny.mp4"]) >= 2  # download + stream


async def test_a_connection_cut_mid_stream_is_resumed_by_a_range_reconnect(
    speech_bytes: bytes, range_server: tuple[int, RangeServed]
) -> None:
    """The server hangs up halfway through: ffmpeg reconnects (-reconnect) with a Range
    from where it stopped, through the proxy, and the audio is whole — sample for sample
    what an unbroken stream gives (the proxy adds nothing to a body it already began)."""
    port, served = range_server
    served.files["/speech.wav"] = speech_bytes
    served.files["/whole.wav"] = speech_bytes
    served.cut.add("/speech.wav")
    asr = ASRProcessor(transcriber=FixedTranscriber("hello world"))
    await asr.start()
    try:
        cut = await asr.transcribe_url("cut", f"http://{HOST}:{port}/speech.wav", _fetcher())
        whole = await asr.transcribe_url("whole", f"http://{HOST}:{port}/whole.wav",
                                         _fetcher())
    finally:
        await asr.stop()
    assert cut.ok and whole.ok, (cut, whole)
    assert cut.audio_s == whole.audio_s and abs(whole.audio_s - 9.96) < 0.1, (cut, whole)
    ranges = [r for p, r in served.hits if p == "/speech.wav"]
    assert f"bytes={len(speech_bytes) // 2}-" in ranges, ranges  # resumed at the cut


async def test_the_proxy_serves_only_its_url_to_a_get(
    speech_bytes: bytes, range_server: tuple[int, RangeServed]
) -> None:
    """Another local process finding the port gets nothing: other paths and methods are
    404s that reach no upstream."""
    port, served = range_server
    served.files["/speech.wav"] = speech_bytes
    async with StreamProxy(_fetcher(), f"http://{HOST}:{port}/speech.wav",
                           read_timeout_s=5) as proxy:
        base = proxy.local_url.rsplit("/", 1)[0]
        async with httpx.AsyncClient(trust_env=False) as client:
            other = await client.get(f"{base}/speech.wav")
            absolute = await client.get(proxy.local_url.replace(
                base, base + "/http://169.254.169.254"))
            post = await client.post(proxy.local_url, content=b"x")
            assert served.hits == []
            ok = await client.get(proxy.local_url)
    assert (other.status_code, absolute.status_code, post.status_code) == (404, 404, 404)
    assert ok.status_code == 200 and ok.content == speech_bytes and proxy.requests == 1


@pytest.mark.parametrize("target", ["127.0.0.1", "2130706433", "[::ffff:127.0.0.1]",
                                    "localhost"])
async def test_a_redirect_to_127_0_0_1_is_refused(target: str, speech_bytes: bytes) -> None:
    """The origin (on 127.0.0.2, allowed as if public) redirects to 127.0.0.1 — spelt as
    an address, a decimal, a mapped IPv6 address, a name — where the same file waits:
    every form is refused and 127.0.0.1 is never asked."""
    origin, origin_served = _range_server("127.0.0.2")
    loopback, loopback_served = _range_server("127.0.0.1")
    try:
        port = loopback.server_address[1]
        loopback_served.files["/speech.wav"] = speech_bytes
        origin_served.redirects["/v.wav"] = f"http://{target}:{port}/speech.wav"

        async def resolve(host: str, port: int) -> list[IPAddress]:
            if host == HOST:
                return [ipaddress.ip_address("127.0.0.2")]
            return await system_resolver(host, port)

        fetcher = MediaFetcher(FetchConfig(), resolver=resolve, allow_networks=["127.0.0.2/32"])
        asr = ASRProcessor(transcriber=FixedTranscriber("never"))
        await asr.start()
        url = f"http://{HOST}:{origin.server_address[1]}/v.wav"
        result = await asr.transcribe_url("r", url, fetcher)
        await asr.stop()
    finally:
        for server in (origin, loopback):
            server.shutdown()
            server.server_close()
    assert result.error == ASRErrorCode.UNSAFE_URL, result
    assert "loopback" in (result.detail or ""), result.detail
    assert origin_served.hits and loopback_served.hits == []


async def test_a_video_without_audio_is_no_audio_stream(
    silent_clip: Path, range_server: tuple[int, RangeServed]
) -> None:
    port, served = range_server
    served.files["/silent.mp4"] = await asyncio.to_thread(silent_clip.read_bytes)
    asr = ASRProcessor(transcriber=FixedTranscriber("never"))
    await asr.start()
    result = await asr.transcribe_url("n", f"http://{HOST}:{port}/silent.mp4", _fetcher())
    await asr.stop()
    assert result.error == ASRErrorCode.NO_AUDIO_STREAM, result


def _ffmpeg_children() -> list[int]:
    """Pids of ffmpeg processes whose parent is this test process."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            text = stat.read_text()
            comm, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:]
            if comm == "ffmpeg" and int(rest.split()[1]) == os.getpid():
                found.append(int(stat.parent.name))
    return found


async def test_a_caller_giving_up_kills_the_in_process_stream(
    long_bytes: bytes, range_server: tuple[int, RangeServed]
) -> None:
    port, served = range_server
    served.files["/stall.mp4"] = long_bytes
    served.stalled.add("/stall.mp4")
    # Long reconnect back-off and wall clock: only killing ffmpeg ends it within 5 s.
    asr = ASRProcessor(ASRConfig(timeout_s=60, stream_read_timeout_s=60,
                                 reconnect_delay_max_s=60),
                       transcriber=FixedTranscriber("never"))
    await asr.start()
    try:
        job = asyncio.create_task(
            asr.transcribe_url("c", f"http://{HOST}:{port}/stall.mp4", _fetcher()))
        async with asyncio.timeout(20):
            while not (served.hits and await asyncio.to_thread(_ffmpeg_children)):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
        async with asyncio.timeout(5):  # killed, not left to the 60 s wall clock
            while await asyncio.to_thread(_ffmpeg_children):  # noqa: ASYNC110  # /proc
                await asyncio.sleep(0.05)
    finally:
        served.stall.set()
        await asr.stop()
