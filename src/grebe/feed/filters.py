"""Filters of the home timeline. Each removes candidates for one reason, so the result
says exactly why a post is missing."""

from __future__ import annotations

from typing import Protocol

from grebe.feed.candidates import FeedCandidate, HomeQuery
from grebe.feed.settings import FeedSettings

Split = tuple[list[FeedCandidate], list[FeedCandidate]]


def _split(candidates: list[FeedCandidate], drop: list[bool]) -> Split:
    kept: list[FeedCandidate] = []
    removed: list[FeedCandidate] = []
    keep, remove = kept.append, removed.append
    for c, d in zip(candidates, drop, strict=True):
        (remove if d else keep)(c)
    return kept, removed


class DuplicateFilter:
    """One candidate per content: a post and its retweets, or the same post from two
    sources, appear once (the first one, i.e. in-network before out-of-network)."""

    name = "duplicate"

    async def filter(self, query: HomeQuery, candidates: list[FeedCandidate]) -> Split:
        seen: set[str] = set()
        drop = []
        for c in candidates:
            content = c.source_post_id or c.post_id  # c.content_id, without the call
            drop.append(content in seen)
            seen.add(content)
        return _split(candidates, drop)


class SeenFilter:
    """Posts the viewer was served or engaged with already."""

    name = "seen"

    async def filter(self, query: HomeQuery, candidates: list[FeedCandidate]) -> Split:
        seen = query.seen.union(query.engaged)
        return _split(candidates, [c.post_id in seen or c.source_post_id in seen
                                   for c in candidates])


class MutedAuthorFilter:
    name = "muted_author"

    async def filter(self, query: HomeQuery, candidates: list[FeedCandidate]) -> Split:
        muted = query.muted
        return _split(candidates, [c.author_id in muted or c.source_author_id in muted
                                   for c in candidates])


class SafetyFilter:
    """Removes posts carrying a label the viewer's safety level blocks."""

    name = "safety"

    def __init__(self, settings: FeedSettings) -> None:
        self.settings = settings

    async def filter(self, query: HomeQuery, candidates: list[FeedCandidate]) -> Split:
        blocked = self.settings.blocked_labels(query.safety_level)
        return _split(candidates, [not blocked.isdisjoint(c.labels) for c in candidates])


class GoneFilter:
    """After selection: drop posts deleted while the request ran (thunder's tombstones)."""

    name = "gone"

    def __init__(self, posts: DeletedPosts) -> None:
        self.posts = posts

    async def filter(self, query: HomeQuery, candidates: list[FeedCandidate]) -> Split:
        is_deleted = self.posts.is_deleted
        return _split(candidates, [is_deleted(c.post_id) or is_deleted(c.content_id)
                                   for c in candidates])


class DeletedPosts(Protocol):
    def is_deleted(self, post_id: str) -> bool: ...
