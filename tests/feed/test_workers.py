"""`grebe feed-serve` with two worker processes on one port (feed.http_workers), and
with one (in its own process, as before): every request on a new connection (the
kernel picks the worker), and no post is served twice to the viewer, whichever
worker served it before; SIGTERM stops them all (exit 0 with workers); a worker that
fails is an error of the whole server, not a half-served port."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from grebe import codec
from grebe.brokers.local import LocalLog, LocalProducer
from grebe.config import load_config
from grebe.errors import GrebeError
from grebe.feed.runner import serve
from grebe.types import Envelope, Post

AUTHORS = [f"a{i}" for i in range(8)]


async def _seed(data_dir: Path) -> None:
    now = time.time()
    posts = [Post(id=f"{author}-{n}", author_id=author, text=f"post {n} of {author}",
                  created_at=now - 60 * n - i)
             for i, author in enumerate(AUTHORS) for n in range(3)]
    producer = LocalProducer(LocalLog(data_dir / "log.db"))
    await producer.start()
    await producer.publish_many("posts", [(None, codec.encode(Envelope(post=p)))
                                          for p in posts])
    await producer.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow  # each worker loads the MiniLM embedder (~2 s on 2 cores)
@pytest.mark.parametrize("workers", [2, 1])
def test_workers_never_serve_a_viewer_the_same_post_twice(tmp_path: Path,
                                                          workers: int) -> None:
    asyncio.run(_seed(tmp_path))
    (tmp_path / "viewers.json").write_text(json.dumps({"alice": {"following": AUTHORS}}))
    config = tmp_path / "grebe.yaml"
    config.write_text(f"data_dir: {tmp_path}\n"
                      f"feed: {{http_workers: {workers}, max_results: 2}}\n")
    port = _free_port()
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-c", "from grebe.cli import main; main()", "feed-serve",
         "-c", str(config), "--viewers", str(tmp_path / "viewers.json"),
         "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "200"})
    try:
        deadline = time.monotonic() + 120
        while (tmp_path / "serve.log").read_text().count("startup complete") < workers:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.2)
        served: list[str] = []
        for _ in range(10):
            with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:  # new connection
                page = client.get("/home/alice")
            assert page.status_code == 200, page.text
            served += [p["post_id"] for p in page.json()["posts"]]
            time.sleep(0.3)  # a refresh, not the same instant
        assert len(served) == 20
        assert len(set(served)) == 20, served
        server.send_signal(signal.SIGTERM)
        # One process: uvicorn re-raises SIGTERM once it has stopped gracefully.
        assert server.wait(timeout=30) in ((0,) if workers > 1 else (0, -signal.SIGTERM)), \
            (tmp_path / "serve.log").read_text()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        log.close()


@pytest.mark.slow  # two worker processes start (imports) and fail
def test_a_worker_that_fails_stops_the_server_with_an_error(tmp_path: Path) -> None:
    viewers = tmp_path / "viewers.json"
    viewers.write_text('{"alice": {"following": 3}}')  # not a list: each worker refuses it
    config = load_config(data_dir=tmp_path, feed={"http_workers": 2, "http_port": 0})
    with pytest.raises(GrebeError, match=r"feed-worker-\d exit code 1"):
        serve(config, viewers)


@pytest.mark.slow  # two workers load the MiniLM embedder
def test_workers_stop_when_the_parent_is_killed(tmp_path: Path) -> None:
    """A parent killed outright (SIGKILL) cannot stop its workers: the kernel tells
    them (PR_SET_PDEATHSIG) and they stop, instead of serving the port on alone."""
    asyncio.run(_seed(tmp_path))
    config = tmp_path / "grebe.yaml"
    config.write_text(f"data_dir: {tmp_path}\nfeed: {{http_workers: 2}}\n")
    port = _free_port()
    log = (tmp_path / "serve.log").open("w")
    children: list[int] = []
    server = subprocess.Popen(
        [sys.executable, "-c", "from grebe.cli import main; main()", "feed-serve",
         "-c", str(config), "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "200"})
    try:
        deadline = time.monotonic() + 120
        while (tmp_path / "serve.log").read_text().count("startup complete") < 2:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.2)
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        children = _children(server.pid)  # to end them here should the test fail
        server.kill()
        server.wait()
        deadline = time.monotonic() + 60
        while True:  # until no worker accepts on the port
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    pass
            except OSError:
                break
            assert time.monotonic() < deadline, "workers still serve without a parent"
            time.sleep(0.2)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        log.close()


def _children(pid: int) -> list[int]:
    """The processes `pid` started (Linux /proc; none where it is absent)."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def test_feed_serve_runs_on_uvloop_when_installed() -> None:
    """feed-serve's loop (`run_loop`, in one process or in each worker) is uvloop's, as
    `grebe run` and `grebe serve` use."""
    import uvloop

    from grebe.feed.runner import run_loop

    loops: list[type] = []

    async def record() -> None:
        loops.append(type(asyncio.get_running_loop()))

    run_loop(record())
    assert loops == [uvloop.Loop]
