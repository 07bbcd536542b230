"""The middleware stack every grebe HTTP surface runs, in one place so `grebe serve`
and `feed-serve` cannot drift apart."""

from __future__ import annotations

from collections.abc import Iterable

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware

from grebe.security.authn import Authenticate
from grebe.security.guard import HeadSizeLimit, SameSiteGuard, allowed_host_names
from grebe.security.keys import KeyStore, Scope
from grebe.security.settings import HttpGuardSettings


def guard_stack(keys: KeyStore, scope: Scope, bound_host: str, http: HttpGuardSettings,
                public_paths: Iterable[str] = ()) -> list[Middleware]:
    """Outermost first: head size, then Host/Origin (not even a 401 is answered to a
    rebinding page), then CORS when origins are allowed, then authentication."""
    stack = [
        Middleware(HeadSizeLimit, max_bytes=http.max_header_bytes),
        Middleware(SameSiteGuard, allowed_hosts=allowed_host_names(bound_host,
                                                                   http.allowed_hosts),
                   allowed_origins=http.allowed_origins),
    ]
    if http.allowed_origins:
        stack.append(Middleware(CORSMiddleware, allow_origins=http.allowed_origins,
                                allow_methods=["GET", "POST"],
                                allow_headers=["authorization", "content-type"]))
    stack.append(Middleware(Authenticate, keys=keys, scope=scope, public_paths=public_paths))
    return stack
