"""`grebe serve`: the pipeline and the HTTP API in one process, until SIGINT/SIGTERM.

Start-up binds the API's socket first (a taken port fails fast, before engines spawn),
then starts the store, the intake and the Runtime, then serves. The first signal stops
intake (POST /v1/posts and /readyz answer 503) and drains the pipeline through
`Runtime.stop`, while the status page stays up to show it; then the HTTP server stops.
A second signal exits at once; whatever was unfinished is redelivered on restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Generator
from typing import Any

import uvicorn

from grebe import constants as C
from grebe.api.app import build_app
from grebe.api.service import ApiService
from grebe.config import GrebeConfig
from grebe.core.signals import ShutdownSignals
from grebe.errors import ConfigError, GrebeError
from grebe.security.keys import KeyStore
from grebe.security.server import require_keys_beyond_loopback, uvicorn_config

log = logging.getLogger(__name__)

HTTP_SHUTDOWN_S = 5  # open HTTP connections get this long once the pipeline is down


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: `serve()` owns the signals, because the
    pipeline must drain before the HTTP side stops."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def bind(host: str, port: int) -> socket.socket:
    """The listening socket; ConfigError naming api.host/api.port when it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as exc:
        raise ConfigError(f"api {host}:{port}: cannot listen ({exc})") from exc


async def serve(config: GrebeConfig) -> int:
    """Run until a signal; returns the process exit code (grebe.constants.EXIT_*)."""
    try:
        require_keys_beyond_loopback(config.api.host, KeyStore.from_config(config.auth),
                                     "api.host")
        sock = bind(config.api.host, config.api.port)
    except ConfigError as exc:
        log.error("cannot start: %s", exc)
        return C.EXIT_FAILED
    service = ApiService(config)
    with ShutdownSignals("refusing new posts, draining in-flight ones") as signals:
        return await _serve(service, sock, signals.requested)


async def _serve(service: ApiService, sock: socket.socket, stop_requested: asyncio.Event) -> int:
    try:
        try:
            await service.start()
        except GrebeError as exc:
            log.error("cannot start: %s", exc)
            return C.EXIT_FAILED
        server = _Server(uvicorn_config(
            build_app(service), service.config.api.http, lifespan="off", log_level="info",
            access_log=False, timeout_graceful_shutdown=HTTP_SHUTDOWN_S,
        ))
        http = asyncio.create_task(server.serve(sockets=[sock]), name="http")
        host, port = sock.getsockname()[:2]
        log.info("grebe serve: http://%s:%d/ (status page), /v1/posts, /v1/analyze (%s)",
                 host, port, "API keys required" if service.config.auth.keys
                 else "no API keys: open to this host's users only")
        reasons = await _wait_for_stop(service, stop_requested, http)
        log.info("stopping: %s", ", ".join(reasons))
        drained = await service.drain()
        server.should_exit = True
        with contextlib.suppress(Exception):
            await http
    finally:
        await service.close()
        sock.close()
    if {"dispatcher exited", "http server exited"} & set(reasons):
        return C.EXIT_FAILED
    return C.EXIT_OK if drained else C.EXIT_NOT_DRAINED


async def _wait_for_stop(service: ApiService, stop_requested: asyncio.Event,
                         http: asyncio.Task[None]) -> list[str]:
    """Block until a signal or a failure; the reasons, sorted."""
    waits: dict[asyncio.Future[Any], str] = {
        asyncio.ensure_future(stop_requested.wait()): "signal",
        http: "http server exited",
    }
    runtime = service.runtime
    if runtime.dispatching is not None:
        waits[runtime.dispatching] = "dispatcher exited"
    finished, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for future in waits:
        if future not in finished and future is not runtime.dispatching and future is not http:
            future.cancel()
    return sorted(waits[f] for f in finished)


def run(config: GrebeConfig) -> int:
    """Blocking entry point of `grebe serve` (uvloop when installed)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(config))
    return uvloop.run(serve(config))
