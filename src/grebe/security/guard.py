"""ASGI middleware refusing requests meant for another site.

DNS rebinding points a name the attacker owns at 127.0.0.1, so a page in a browser on
this host can reach a loopback server while the browser believes it talks to the
attacker's site: the Host header still carries the attacker's name, so an allowlist of
Host names stops it (421). A plain cross-site page can still *send* a request (a form
POST, or fetch with mode no-cors) even though it cannot read the answer: the browser
marks it with `Origin` (and `Sec-Fetch-Site`), so any origin not allowed is refused (403)
before a handler runs. Clients that are not browsers send neither header.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from grebe import constants as C

WILDCARD = "*"


def host_name(host_header: str) -> str:
    """The name in a Host header, without port or IPv6 brackets, lower-cased."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def allowed_host_names(bound_host: str, extra: Iterable[str]) -> frozenset[str]:
    """localhost, 127.0.0.1, ::1, the bound host (unless a wildcard address) and `extra`."""
    names = {*C.LOOPBACK_HOSTS, *(host_name(h) for h in extra)}
    if bound_host not in ("", "0.0.0.0", "::"):
        names.add(host_name(bound_host))
    return frozenset(names)


class SameSiteGuard:
    def __init__(self, app: ASGIApp, *, allowed_hosts: frozenset[str],
                 allowed_origins: Iterable[str] = ()) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts
        self.allowed_origins = frozenset(o.rstrip("/").lower() for o in allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if WILDCARD not in self.allowed_hosts and host_name(host) not in self.allowed_hosts:
            response = JSONResponse({
                "error": f"Host {host!r} is not served here; add it to allowed_hosts "
                         "(see docs/security.md)"}, status_code=421)
            await response(scope, receive, send)
            return
        problem = self._cross_origin(headers, host)
        if problem is not None:
            await JSONResponse({"error": problem}, status_code=403)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _cross_origin(self, headers: Headers, host: str) -> str | None:
        origin = headers.get("origin")
        if origin is not None:
            normalized = origin.rstrip("/").lower()
            if normalized in self.allowed_origins:
                return None
            if urlsplit(normalized).netloc != host.lower():
                return f"cross-origin requests from {origin!r} are refused (allowed_origins)"
        elif headers.get("sec-fetch-site") == "cross-site":
            return "cross-site browser requests are refused (allowed_origins)"
        return None


class HeadSizeLimit:
    """431 for a request whose line and headers exceed `max_bytes`. uvicorn's h11 limit
    (`h11_max_incomplete_event_size`) only bites while a head is still arriving; a large
    head that arrives in one packet is parsed whole, so it is measured here too."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
            size += sum(len(name) + len(value) + 4 for name, value in scope["headers"])
            if size > self.max_bytes:
                response = JSONResponse(
                    {"error": f"request head over {self.max_bytes} bytes (max_header_bytes)"},
                    status_code=431, headers={"connection": "close"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
