"""The loader protocols: three lookups by id, and the post table every stream fills.

A loader answers for what it has: ids it does not know are simply absent from the
returned mapping (the caller turns an absent post into a `not_found` skip). A loader
that cannot answer at all raises HydrationUnavailableError: the lookup is down, which is
the system's fault and is retried, never pinned on the post.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from grebe.types import Post, User


@runtime_checkable
class PostLoader(Protocol):
    async def get_posts(self, ids: Sequence[str]) -> dict[str, Post]: ...

    async def recent_posts(self, author_id: str, n: int) -> list[Post]:
        """The author's latest `n` posts, newest first."""
        ...


@runtime_checkable
class UserLoader(Protocol):
    async def get_users(self, ids: Sequence[str]) -> dict[str, User]: ...


class Loader(PostLoader, UserLoader, Protocol):
    """Both lookups, with a lifecycle (connections open in start(), in the engine)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class PostTable(Loader, Protocol):
    """A loader that is also written: every post (and user) that passes through a
    stream is recorded, so a later message may carry only its id."""

    async def record(self, posts: Sequence[Post], users: Sequence[User]) -> None: ...


@runtime_checkable
class RemembersRecorded(Protocol):
    """A loader with a cache in front of it (CachedLoader): what the hydration step just
    recorded is put in the cache too, so the next lookup in this process needs no trip."""

    def remember(self, posts: Sequence[Post], users: Sequence[User]) -> None: ...
