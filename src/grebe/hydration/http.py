"""Hydration from a configured HTTP lookup service (the platform's own post/user API).

The contract, one GET per lookup, JSON answers (missing ids are simply left out):

    GET {url}/posts?ids=1&ids=2               -> {"posts": [Post, ...]}
    GET {url}/users?ids=u1                    -> {"users": [User, ...]}
    GET {url}/users/{author_id}/posts?limit=5 -> {"posts": [Post, ...]}  newest first

Any other answer (connection refused, timeout, a non-200 status, a body that is not
that shape) means the lookup is down: HydrationUnavailableError, retried, never blamed on
the post. The URL is operator configuration, not user input, so no SSRF guard applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

import httpx
import msgspec

from grebe.errors import HydrationUnavailableError
from grebe.types import Post, User


class _Posts(msgspec.Struct):
    posts: list[Post]


class _Users(msgspec.Struct):
    users: list[User]


_posts_decoder = msgspec.json.Decoder(_Posts)
_users_decoder = msgspec.json.Decoder(_Users)


class HttpLoader:
    """Loader over HTTP; the client is built in start(), in the engine process."""

    def __init__(self, url: str, *, timeout_s: float, headers: dict[str, str] | None = None):
        self.url = url.rstrip("/")
        self._timeout_s = timeout_s
        self._headers = headers or {}
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        self._client = httpx.AsyncClient(timeout=self._timeout_s, headers=self._headers,
                                         follow_redirects=False)

    async def stop(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def get_posts(self, ids: Sequence[str]) -> dict[str, Post]:
        if not ids:
            return {}
        body = await self._get("/posts", {"ids": list(dict.fromkeys(ids))})
        return {p.id: p for p in self._decode(_posts_decoder, body).posts}

    async def get_users(self, ids: Sequence[str]) -> dict[str, User]:
        if not ids:
            return {}
        body = await self._get("/users", {"ids": list(dict.fromkeys(ids))})
        return {u.id: u for u in self._decode(_users_decoder, body).users}

    async def recent_posts(self, author_id: str, n: int) -> list[Post]:
        body = await self._get(f"/users/{quote(author_id, safe='')}/posts", {"limit": n})
        return self._decode(_posts_decoder, body).posts[:n]

    async def _get(self, path: str, params: dict[str, object]) -> bytes:
        if self._client is None:
            raise HydrationUnavailableError(f"HTTP lookup {self.url} is not started")
        try:
            response = await self._client.get(self.url + path, params=params)  # type: ignore[arg-type]
        except httpx.HTTPError as exc:
            raise HydrationUnavailableError(
                f"HTTP lookup {self.url}{path}: {type(exc).__name__}: {exc}") from exc
        if response.status_code != httpx.codes.OK:
            raise HydrationUnavailableError(
                f"HTTP lookup {self.url}{path}: status {response.status_code}")
        return response.content

    def _decode(self, decoder: msgspec.json.Decoder, body: bytes):  # type: ignore[type-arg,no-untyped-def]
        try:
            return decoder.decode(body)
        except msgspec.DecodeError as exc:
            raise HydrationUnavailableError(
                f"HTTP lookup {self.url}: unexpected answer: {exc}") from exc
