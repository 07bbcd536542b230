"""uvicorn for grebe's HTTP surfaces: timeouts on every phase of a connection, and a
refusal to listen beyond loopback when no keys are configured.

uvicorn closes an idle keep-alive connection after `timeout_keep_alive`, but it never
times out a connection that has not yet sent a whole request head: a fresh connection
that sends nothing, or one that trickles a header byte every few seconds (slowloris),
stays open for as long as the client likes. `HeaderTimeoutProtocol` arms a timer when
a connection opens and whenever a response completes, and closes the connection unless
a complete request head arrived before it fires. Bodies are bounded by the handlers'
own read timeout (`body_timeout_s`), heads by `max_header_bytes`, connections by
`max_connections` (503 beyond it).
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

from grebe import constants as C
from grebe.errors import ConfigError
from grebe.security.keys import KeyStore
from grebe.security.settings import HttpGuardSettings


class HeaderTimeoutProtocol(H11Protocol):
    """h11 with a deadline for each request head (see the module docstring)."""

    header_timeout_s: float = C.DEFAULT_HTTP_HEADER_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is not self._waiting_after:  # a new request head was parsed
            self._disarm_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.cycle is not None and (
                self.cycle.response_complete):
            self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._waiting_after: RequestResponseCycle | None = self.cycle
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


def uvicorn_config(app: Any, settings: HttpGuardSettings, **options: Any) -> uvicorn.Config:
    """A uvicorn.Config with the guard's limits (host/port or sockets come in `options`)."""
    protocol = type("GuardedH11Protocol", (HeaderTimeoutProtocol,),
                    {"header_timeout_s": settings.header_timeout_s})
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
