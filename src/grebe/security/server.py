"""uvicorn for grebe's HTTP surfaces: timeouts on every phase of a connection, and a
refusal to listen beyond loopback when no keys are configured.

uvicorn closes an idle keep-alive connection after `timeout_keep_alive`, but it never
times out a connection that has not yet sent a whole request head: a fresh connection
that sends nothing, or one that trickles a header byte every few seconds (slowloris),
stays open for as long as the client likes. `HeaderDeadline` arms a timer when a
connection opens and whenever a response completes, and closes the connection unless
a complete request head arrived before it fires; it also counts the bytes of a head
still arriving and answers 400 past `max_header_bytes` (h11 has that limit itself,
httptools does not). Bodies are bounded by the handlers' own read timeout
(`body_timeout_s`), heads that arrive whole by the HeadSizeLimit middleware,
connections by `max_connections` (503 beyond it).

The parser is httptools (C, llhttp; a dependency), h11 (pure Python) on request: the
feed's home endpoint is to answer 200 requests/s, and a request through h11 cost
0.51-0.65 ms of server CPU against 0.42-0.43 through httptools (bench/feed_http.py
--path healthz, docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from grebe import constants as C
from grebe.errors import ConfigError
from grebe.security.keys import KeyStore
from grebe.security.settings import HttpGuardSettings


class HeaderDeadline:
    """A deadline and a size limit for each request head (see the module docstring);
    mixed in before a uvicorn HTTP protocol class."""

    header_timeout_s: float = C.DEFAULT_HTTP_HEADER_TIMEOUT_S
    max_header_bytes: int = C.DEFAULT_HTTP_MAX_HEADER_BYTES
    # The protocol's own (uvicorn's) attributes this mixin reads:
    cycle: Any
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # type: ignore[misc]
        if self.cycle is not self._waiting_after:  # a new request head was parsed
            self._disarm_header_timer()
        elif self._header_timer is not None:  # still waiting for a whole head
            self._head_bytes += len(data)
            if self._head_bytes > self.max_header_bytes and not self.transport.is_closing():
                self._disarm_header_timer()
                self.send_400_response(  # type: ignore[attr-defined]
                    f"request head over {self.max_header_bytes} bytes (max_header_bytes)")

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if not self.transport.is_closing() and self.cycle is not None and (
                self.cycle.response_complete):
            self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)  # type: ignore[misc]

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._waiting_after: Any = self.cycle
        self._head_bytes = 0
        self._header_timer: asyncio.TimerHandle | None = self.loop.call_later(
            self.header_timeout_s, self._header_timed_out)

    def _disarm_header_timer(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
            self._header_timer = None
        self._waiting_after = self.cycle

    def _header_timed_out(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()


class HeaderTimeoutProtocol(HeaderDeadline, H11Protocol):
    """h11 with a deadline for each request head."""


class HttpToolsHeaderTimeoutProtocol(HeaderDeadline, HttpToolsProtocol):
    """httptools with a deadline and a size limit for each request head."""


PROTOCOLS: dict[str, type[HeaderDeadline]] = {
    "h11": HeaderTimeoutProtocol, "httptools": HttpToolsHeaderTimeoutProtocol}


#: The parser unless one is asked for. This module imports both protocol classes, so a
#: build without httptools cannot import it at all: there is no run-time fallback to make.
DEFAULT_HTTP_PARSER = "httptools"


def uvicorn_config(app: Any, settings: HttpGuardSettings, *,
                   http_parser: str = DEFAULT_HTTP_PARSER, **options: Any) -> uvicorn.Config:
    """A uvicorn.Config with the guard's limits (host/port or sockets come in `options`);
    `http_parser` "httptools" (the default) or "h11"."""
    if http_parser not in PROTOCOLS:
        raise ConfigError(f"unknown HTTP parser {http_parser!r}; known: {', '.join(PROTOCOLS)}")
    protocol = type(f"Guarded{PROTOCOLS[http_parser].__name__}", (PROTOCOLS[http_parser],),
                    {"header_timeout_s": settings.header_timeout_s,
                     "max_header_bytes": settings.max_header_bytes})
    return uvicorn.Config(
        app, http=protocol, timeout_keep_alive=settings.keep_alive_s,
        limit_concurrency=settings.max_connections,
        h11_max_incomplete_event_size=settings.max_header_bytes, **options,
    )


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve anywhere


def require_keys_beyond_loopback(host: str, keys: KeyStore, where: str) -> None:
    """Refuse to serve other machines with no keys: anyone who can reach the port could
    submit posts, spend model quota and read annotations."""
    if not keys and not is_loopback(host):
        raise ConfigError(
            f"{where} is {host!r}, which other machines can reach, and auth.keys is empty: "
            "add a key (grebe api-key new <id>; see docs/security.md) or bind to 127.0.0.1"
        )
