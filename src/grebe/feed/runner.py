"""Build the home feed from the configuration, for the CLI and the HTTP server.

The thunder store is replayed from the configured stream (without consuming it); the
annotation store and the text embedder are the configured ones; in-network posts come
from that store, or from a thunder service when `feed.thunder_target` is set.

`serve` runs feed-serve: one process, or `feed.http_workers` worker processes on one
port (SO_REUSEPORT: the kernel spreads connections over them), each with its own feed
and the served posts and interest searches shared (grebe.feed.replication), under a
parent that forwards SIGINT/SIGTERM and stops them all when one exits."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from grebe.config import GrebeConfig
from grebe.errors import ConfigError, GrebeError
from grebe.feed.home import HomeFeed, build_home_pipeline
from grebe.feed.replication import ReplicatedViewers
from grebe.feed.viewers import MemoryViewerDirectory, ViewerDirectory
from grebe.stores.factory import build_store
from grebe.thunder.client import GrpcThunderClient
from grebe.thunder.runner import replay_store

log = logging.getLogger(__name__)

#: How long a worker has to stop gracefully (finish its requests) before it is killed.
WORKER_STOP_S = 30.0


def thunder_key(env: str | None) -> str | None:
    """The key for thunder from the variable `feed.thunder_key_env` names (keys stay out
    of config files)."""
    if env is None:
        return None
    key = os.environ.get(env)
    if not key:
        raise ConfigError(f"feed.thunder_key_env: environment variable {env} is not set")
    return key


@dataclass(frozen=True)
class WorkerSeat:
    """One of `count` feed-serve workers: its index, the port they share, and the
    private directory of their served-page sockets."""

    index: int
    count: int
    port: int
    sockets: Path

    def socket_path(self, index: int) -> Path:
        return self.sockets / f"worker-{index}.sock"

    def replicated(self, viewers: MemoryViewerDirectory) -> ReplicatedViewers:
        return ReplicatedViewers(viewers, self.socket_path(self.index),
                                 [self.socket_path(i) for i in range(self.count)])


def reuse_port_socket(host: str, port: int, *, listen: bool) -> socket.socket:
    """A TCP socket bound to host:port with SO_REUSEPORT (listening, for a worker; not,
    for the parent, which holds the port a `port` of 0 picked)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if listen:
        sock.listen(2048)
        sock.setblocking(False)
    return sock


@contextlib.asynccontextmanager
async def feed_from_config(
    config: GrebeConfig, viewers_file: Path | None = None, seat: WorkerSeat | None = None,
) -> AsyncIterator[HomeFeed]:
    from grebe.inference.minilm import MiniLMEmbedder

    settings = config.feed
    memory = (MemoryViewerDirectory.from_file(viewers_file) if viewers_file
              else MemoryViewerDirectory())
    replicated = seat.replicated(memory) if seat is not None else None
    viewers: ViewerDirectory = replicated if replicated is not None else memory
    store = build_store(config)
    embedder = MiniLMEmbedder(model_dir=config.inference.minilm.model_dir)
    await store.start()
    try:
        if replicated is not None:
            await replicated.start()  # before loading: other workers send pages from now
        await embedder.start()
        thunder_store = await replay_store(config)
        thunder = GrpcThunderClient(
            settings.thunder_target, tls_ca_file=settings.thunder_tls_ca_file,
            key=thunder_key(settings.thunder_key_env),
        ) if settings.thunder_target else None
        feed = build_home_pipeline(config, store, thunder_store, embedder, viewers=viewers,
                                   thunder=thunder)
        if replicated is not None:
            replicated.share_searches(feed.similar)
        await feed.index_posts(list(thunder_store.by_id))
        await feed.start()
        try:
            yield feed
        finally:
            await feed.aclose()
    finally:
        await embedder.stop()
        await store.stop()
        if replicated is not None:
            await replicated.stop()


def serve(config: GrebeConfig, viewers_file: Path | None = None,
          setup: Callable[[], None] | None = None) -> None:
    """feed-serve until SIGINT/SIGTERM: in this process, or in `feed.http_workers`
    worker processes (`setup`, e.g. logging, runs first in each)."""
    if config.feed.http_workers == 1:
        run_loop(serve_http(config, viewers_file))
        return
    serve_workers(config, viewers_file, setup)


def serve_workers(config: GrebeConfig, viewers_file: Path | None,
                  setup: Callable[[], None] | None) -> None:
    """Start the workers, forward SIGINT/SIGTERM to them (as SIGTERM: uvicorn's
    graceful stop), and when one exits stop the rest; a worker that failed is a
    GrebeError here."""
    from grebe.security.keys import KeyStore
    from grebe.security.server import require_keys_beyond_loopback

    settings = config.feed
    # Refused here, once, rather than in every worker.
    require_keys_beyond_loopback(settings.http_host, KeyStore.from_config(config.auth),
                                 "feed.http_host")
    try:
        held = reuse_port_socket(settings.http_host, settings.http_port, listen=False)
    except OSError as exc:
        raise ConfigError(f"feed.http_host/http_port {settings.http_host}:"
                          f"{settings.http_port}: {exc}") from exc
    port = held.getsockname()[1]
    context = multiprocessing.get_context("spawn")
    with held, tempfile.TemporaryDirectory(prefix="grebe-feed-") as sockets:
        workers = [context.Process(
            target=_worker, name=f"feed-worker-{i}",
            args=(config, viewers_file, WorkerSeat(i, settings.http_workers, port,
                                                   Path(sockets)), setup))
            for i in range(settings.http_workers)]

        def stop(signum: int, frame: FrameType | None) -> None:
            for worker in workers:
                if worker.pid is not None and worker.is_alive():
                    os.kill(worker.pid, signal.SIGTERM)

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            for worker in workers:
                worker.start()
            log.info("feed-serve: %d workers on %s:%d", len(workers), settings.http_host,
                     port)
            multiprocessing.connection.wait([w.sentinel for w in workers])
        finally:
            stop(signal.SIGTERM, None)
            for worker in workers:
                if worker.pid is None:
                    continue  # never started
                worker.join(WORKER_STOP_S)
                if worker.is_alive():  # stuck in its graceful stop: ended
                    log.warning("feed-serve %s did not stop in %.0f s; killed", worker.name,
                                WORKER_STOP_S)
                    worker.kill()
                    worker.join()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    failed = [(w.name, w.exitcode) for w in workers
              if w.pid is not None and w.exitcode not in (0, -signal.SIGTERM)]
    if failed:
        raise GrebeError("feed-serve workers failed: " + ", ".join(
            f"{name} exit code {code}" for name, code in failed))


def _worker(config: GrebeConfig, viewers_file: Path | None, seat: WorkerSeat,
            setup: Callable[[], None] | None) -> None:
    _stop_with_parent()
    if setup is not None:
        setup()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the workers
    run_loop(serve_http(config, viewers_file, seat))


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run feed-serve's event loop: uvloop when installed, as `grebe run` and `grebe
    serve` do (its loop and sockets in C; the workers are spawned, never forked, so
    uvloop's fork() is not in the way), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


def _stop_with_parent() -> None:
    """Have the kernel send this worker SIGTERM (uvicorn's graceful stop) when the
    parent dies: a parent killed outright cannot stop its workers, which would go on
    serving the port alone (Linux's PR_SET_PDEATHSIG; elsewhere nothing)."""
    if sys.platform != "linux":
        return
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    parent = multiprocessing.parent_process()
    if parent is not None and not parent.is_alive():  # died before the prctl
        raise SystemExit("feed-serve's parent is gone")


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


async def serve_http(config: GrebeConfig, viewers_file: Path | None = None,
                     seat: WorkerSeat | None = None) -> None:
    """Serve GET /home/{user_id} until SIGINT/SIGTERM (uvicorn handles the signals); as
    one of several workers given a `seat` (its listening socket on the shared port)."""
    import uvicorn

    from grebe.core.engine_process import tune_gc
    from grebe.feed.blas import use_one_thread
    from grebe.feed.http import build_feed_app
    from grebe.security.keys import KeyStore
    from grebe.security.server import require_keys_beyond_loopback, uvicorn_config

    settings = config.feed
    keys = KeyStore.from_config(config.auth)
    require_keys_beyond_loopback(settings.http_host, keys, "feed.http_host")
    async with feed_from_config(config, viewers_file, seat) as feed:
        # What is loaded now lives as long as the server; a request allocates thousands
        # of short-lived objects, which the default thresholds collect in many passes
        # (~1.3 ms of a ~15 ms home request, docs/benchmarks.md).
        tune_gc()
        use_one_thread()  # the ranker's small products: no BLAS threads (grebe.feed.blas)
        app = build_feed_app(feed, keys)
        if seat is None:
            server = uvicorn.Server(uvicorn_config(
                app, settings.http, host=settings.http_host, port=settings.http_port,
                log_level="info"))
            await server.serve()
            return
        sock = reuse_port_socket(settings.http_host, seat.port, listen=True)
        server = uvicorn.Server(uvicorn_config(app, settings.http, log_level="info"))
        await server.serve(sockets=[sock])
