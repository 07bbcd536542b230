"""Filters of the home timeline. Each removes candidates for one reason, so the result
says exactly why a post is missing.

Each works on a list of candidates or on a candidate frame (grebe.feed.frame): it reads
the columns it needs and returns the same kind it was given, so a frame's rows are
never built to be filtered."""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from operator import truth
from typing import Protocol

import numpy as np

from grebe.feed.candidates import FeedCandidate, HomeQuery
from grebe.feed.features import LABEL_SET
from grebe.feed.frame import CandidateFrame, column
from grebe.feed.labels import NO_CODE, LabelSets
from grebe.feed.settings import FeedSettings

Split = tuple[Sequence[FeedCandidate], Sequence[FeedCandidate]]


def _split(candidates: Sequence[FeedCandidate], drop: Sequence[bool] | np.ndarray) -> Split:
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
        n = len(candidates)
        contents = content_ids(candidates)
        # The first position of each content: a dict built from the end keeps, for each
        # key, the last value written, i.e. its first position (all in C, no Python loop
        # over 1,500 candidates).
        first = dict(zip(reversed(contents), range(n - 1, -1, -1), strict=True))
        drop = np.ones(n, dtype=bool)
        drop[np.fromiter(first.values(), dtype=np.intp, count=len(first))] = False
        return _split(candidates, drop)


class SeenFilter:
    """Posts the viewer was served or engaged with already."""

    name = "seen"

    async def filter(self, query: HomeQuery, candidates: Sequence[FeedCandidate]) -> Split:
        n = len(candidates)
        drop = np.zeros(n, dtype=bool)
        # The viewer's seen set may hold thousands of posts: looked up as it is (a
        # union with the engaged posts would copy it on every request).
        for posts in (query.seen, set(query.engaged)):
            if posts:
                drop |= _member(posts, column(candidates, "post_id"), n)
                drop |= _member(posts, column(candidates, "source_post_id"), n)
        return _split(candidates, drop)


class MutedAuthorFilter:
    name = "muted_author"

    async def filter(self, query: HomeQuery, candidates: Sequence[FeedCandidate]) -> Split:
        muted = query.muted
        n = len(candidates)
        if not muted:
            return _split(candidates, np.zeros(n, dtype=bool))
        return _split(candidates, _member(muted, column(candidates, "author_id"), n)
                      | _member(muted, column(candidates, "source_author_id"), n))


class SafetyFilter:
    """Removes posts carrying a label the viewer's safety level blocks.

    Given the feature table's label sets, a frame's rows are judged by their label-set
    codes (grebe.feed.labels): one answer per distinct set, one array lookup per row;
    rows without a code, and lists of candidates, by their labels."""

    name = "safety"

    def __init__(self, settings: FeedSettings, label_sets: LabelSets | None = None) -> None:
        self.settings = settings
        self.label_sets = label_sets

    async def filter(self, query: HomeQuery, candidates: Sequence[FeedCandidate]) -> Split:
        blocked = self.settings.blocked_labels(query.safety_level)
        n = len(candidates)
        if not blocked:
            return _split(candidates, np.zeros(n, dtype=bool))
        if self.label_sets is not None and isinstance(candidates, CandidateFrame) \
                and candidates.has(LABEL_SET):
            codes = candidates.column(LABEL_SET)
            drop = np.zeros(n, dtype=bool)
            coded = codes != NO_CODE
            drop[coded] = self.label_sets.blocked(blocked)[codes[coded]]
            other = np.flatnonzero(~coded)
            if len(other):
                labels = candidates.column("labels")[other]
                drop[other] = ~np.fromiter(map(blocked.isdisjoint, labels), dtype=bool,
                                           count=len(other))
            return _split(candidates, drop)
        return _split(candidates, ~np.fromiter(
            map(blocked.isdisjoint, column(candidates, "labels")), dtype=bool, count=n))


def _member(members: Container[object], values: Iterable[object], n: int) -> np.ndarray:
    """Whether each of the n values is in `members`: one `map` in C, no Python loop."""
    return np.fromiter(map(members.__contains__, values), dtype=bool, count=n)


def content_ids(candidates: Sequence[FeedCandidate]) -> list[str]:
    """Each candidate's content id (a retweet shows its source post), as `content_id`
    gives it, read from the columns (np.where over the id columns in a frame)."""
    posts, sources = column(candidates, "post_id"), column(candidates, "source_post_id")
    if isinstance(posts, np.ndarray) and isinstance(sources, np.ndarray):
        shown = np.fromiter(map(truth, sources), dtype=bool, count=len(sources))
        return np.where(shown, sources, posts).tolist()  # type: ignore[no-any-return]
    return [source or post for source, post in zip(sources, posts, strict=True)]


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

