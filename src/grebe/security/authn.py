"""ASGI middleware: every request but the public paths carries a valid key.

With no keys configured the server is bound to loopback (grebe.security.server refuses
anything else at start) and every caller is the host's own user: the request goes on as
`ANONYMOUS`, which may do everything. With keys, a missing or wrong key is 401 with a
`WWW-Authenticate` challenge (Bearer for programs; Basic so that a browser shows a login
prompt for the status page: any user name, the key as password), and a key without this
surface's scope is 403. The principal is left in `request.state.principal` for handlers
(rate limits per key, debug output only for keys with the debug scope).
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from grebe.security.keys import ANONYMOUS, KeyStore, Principal
from grebe.security.keys import Scope as KeyScope

PRINCIPAL = "principal"
CHALLENGE = 'Bearer realm="grebe", Basic realm="grebe", charset="UTF-8"'


def principal_of(state: object) -> Principal:
    """The caller `Authenticate` found (anonymous when the app runs without it)."""
    return getattr(state, PRINCIPAL, ANONYMOUS)


class Authenticate:
    def __init__(self, app: ASGIApp, *, keys: KeyStore, scope: KeyScope,
                 public_paths: Iterable[str] = ()) -> None:
        self.app = app
        self.keys = keys
        self.scope = scope
        self.public_paths = frozenset(public_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        principal: Principal | None = ANONYMOUS
        if self.keys and scope["path"] not in self.public_paths:
            principal = self.keys.verify_header(Headers(scope=scope).get("authorization"))
            if principal is None:
                response = JSONResponse(
                    {"error": "a valid API key is required (Authorization: Bearer <key>)"},
                    status_code=401, headers={"www-authenticate": CHALLENGE})
                await response(scope, receive, send)
                return
            if not principal.may(self.scope):
                response = JSONResponse(
                    {"error": f"key {principal.key_id!r} lacks the {self.scope!r} scope"},
                    status_code=403)
                await response(scope, receive, send)
                return
        scope.setdefault("state", {})[PRINCIPAL] = principal
        await self.app(scope, receive, send)
