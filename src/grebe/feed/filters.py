"""Filters of the home timeline. Each removes candidates for one reason, so the result
says exactly why a post is missing.

Each works on a list of candidates or on a candidate frame (grebe.feed.frame): it reads
the columns it needs and returns the same kind it was given, so a frame's rows are
never built to be filtered."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from grebe.feed.candidates import FeedCandidate, HomeQuery
from grebe.feed.frame import CandidateFrame, column
from grebe.feed.settings import FeedSettings

Split = tuple[Sequence[FeedCandidate], Sequence[FeedCandidate]]


def _split(candidates: Sequence[FeedCandidate], drop: list[bool]) -> Split:
    if isinstance(candidates, CandidateFrame):
        return candidates.split(drop)
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

    async def filter(self, query: HomeQuery, candidates: Sequence[FeedCandidate]) -> Split:
        seen: set[str] = set()
        drop = []
        for source, post in zip(column(candidates, "source_post_id"),
                                column(candidates, "post_id"), strict=True):
            content = source or post  # c.content_id, without the call
            drop.append(content in seen)
            seen.add(content)
        return _split(candidates, drop)


class SeenFilter:
    """Posts the viewer was served or engaged with already."""

    name = "seen"

    async def filter(self, query: HomeQuery, candidates: Sequence[FeedCandidate]) -> Split:
        seen = query.seen.union(query.engaged)
        return _split(candidates, [post in seen or source in seen for post, source in zip(
            column(candidates, "post_id"), column(candidates, "source_post_id"),
            strict=True)])


class MutedAuthorFilter:
    name = "muted_author"

    async def filter(self, query: HomeQuery, candidates: Sequence[FeedCandidate]) -> Split:
        muted = query.muted
        if not muted:
            return _split(candidates, [False] * len(candidates))
        return _split(candidates, [author in muted or source in muted for author, source in zip(
            column(candidates, "author_id"), column(candidates, "source_author_id"),
            strict=True)])


class SafetyFilter:
    """Removes posts carrying a label the viewer's safety level blocks."""

    name = "safety"

    def __init__(self, settings: FeedSettings) -> None:
        self.settings = settings

    async def filter(self, query: HomeQuery, candidates: Sequence[FeedCandidate]) -> Split:
        blocked = self.settings.blocked_labels(query.safety_level)
        if not blocked:
            return _split(candidates, [False] * len(candidates))
        disjoint = blocked.isdisjoint
        return _split(candidates, [not disjoint(labels)
                                   for labels in column(candidates, "labels")])


class GoneFilter:
    """After selection: drop posts deleted while the request ran (thunder's tombstones)."""

    name = "gone"

    def __init__(self, posts: DeletedPosts) -> None:
        self.posts = posts

    async def filter(self, query: HomeQuery, candidates: Sequence[FeedCandidate]) -> Split:
        is_deleted = self.posts.is_deleted
        return _split(candidates, [is_deleted(c.post_id) or is_deleted(c.content_id)
                                   for c in candidates])


class DeletedPosts(Protocol):
    def is_deleted(self, post_id: str) -> bool: ...

