"""The read side of the thunder store: which posts a query takes, and in what order.

Serving caps: of each followed author, the newest `serve_originals_per_author` originals
and the newest `serve_secondary_per_author` replies/retweets are taken (excluded ids
skipped first, from the newest `max_scan_per_author` of each list only); replies among
those that break the reply rule are then dropped. Replies are served only into a
followed author's conversation: the conversation's root author is followed (or is the
viewer), and the post replied to is by a followed author, the viewer, or the replier (a
self-thread).

How: the followed authors' timestamp arrays are joined into one numpy array, each
author's newest k (and the holes excluded ids leave) are marked, the newest are
partitioned out, and only then are records read: the ones returned, plus the replies
checked against the reply rule on the way. Reading every candidate record (scattered in
memory) was most of the cost before (bench/thunder.py, docs/benchmarks.md).
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Iterator
from operator import attrgetter

import numpy as np

from grebe.thunder.records import AuthorPosts, InNetworkQuery, LightPost, position
from grebe.thunder.settings import ThunderSettings

_by_created = attrgetter("created_at")


def select(
    query: InNetworkQuery, found: list[AuthorPosts], settings: ThunderSettings,
    by_id: dict[str, LightPost],
) -> tuple[list[LightPost], int, int]:
    """The `max_results` newest posts under the per-author caps, newest first, how
    many posts the caps took (before the reply rule), and how many distinct authors
    the posts have."""
    limit = query.max_results
    segments = _segments(query, found, settings, by_id)
    if segments is None or limit <= 0:
        return [], 0, 0
    lens = np.fromiter(map(len, segments.stamps), dtype=np.intp,
                       count=len(segments.stamps))
    ends = np.cumsum(lens)
    starts = ends - lens
    total = int(ends[-1])
    if not total:
        return [], 0, 0
    every = np.frombuffer(b"".join(segments.stamps), dtype=np.float64)
    segment_of = np.repeat(np.arange(len(lens)), lens)
    k_of = np.repeat(segments.caps, segments.sizes)[segment_of]
    if segments.holes:
        # Excluded posts leave holes: the newest k of each segment not excluded,
        # counting the kept posts from each one to its segment's end.
        holes = np.array(segments.holes, dtype=np.intp)
        keep = np.ones(total, dtype=bool)
        keep[starts[holes[:, 0]] + holes[:, 1]] = False
        kept_after = np.zeros(total + 1, dtype=np.intp)
        kept_after[:total] = np.cumsum(keep[::-1])[::-1]
        # Only the newest `max_scan_per_author` of each list are looked at.
        picked = np.flatnonzero(
            keep & (kept_after[:total] - kept_after[ends[segment_of]] <= k_of)
            & (ends[segment_of] - np.arange(total) <= settings.max_scan_per_author))
    else:
        # The newest k of each segment: at most k from its end.
        picked = np.flatnonzero(ends[segment_of] - np.arange(total) <= k_of)
    seqs, first_secondary = segments.seqs, segments.first_secondary
    allowed: set[str] | None = None
    out: list[LightPost] = []
    append = out.append
    out_segments: list[int] = []  # the segment of each post in `out`
    add_segment = out_segments.append
    for order in _newest_first(every[picked], limit):
        taken = picked[order]
        segment = segment_of[taken]
        for seg, i in zip(segment.tolist(), (taken - starts[segment]).tolist(),
                          strict=True):
            post = seqs[seg][i]
            if seg >= first_secondary >= 0 and post.in_reply_to_post_id is not None:
                if allowed is None:
                    allowed = set(query.following_user_ids)
                    allowed.add(query.user_id)
                # Replies only into a followed author's conversation: the root
                # author is followed (or the viewer), and so is the author replied
                # to (or it is a self-thread).
                if post.conversation_author_id not in allowed or (
                    post.in_reply_to_author_id not in allowed
                    and post.in_reply_to_author_id != post.author_id
                ):
                    continue
            append(post)
            add_segment(seg)
            if len(out) == limit:
                return out, len(picked), _authors(out_segments, found)
    return out, len(picked), _authors(out_segments, found)


def _authors(out_segments: list[int], found: list[AuthorPosts]) -> int:
    """Distinct authors of the posts taken from these segments. Each kind has one
    segment per entry of `found`, so a segment's author is `found[segment % len]`;
    counted by the identity of those (already read) objects, not by each post's
    author id string: reading 800 of those, scattered in memory, cost ~0.4 ms per
    answer on a loaded box (docs/benchmarks.md)."""
    n = len(found)
    rows = np.unique(np.array(out_segments, dtype=np.intp) % n).tolist()
    return len(set(map(id, map(found.__getitem__, rows))))


def _segments(
    query: InNetworkQuery, found: list[AuthorPosts], settings: ThunderSettings,
    by_id: dict[str, LightPost],
) -> _Segments | None:
    """One segment per (kind, followed author): its record list and timestamps
    (the author's own array, not a copy; a filtered copy for an author with an
    excluded post). None when the caps take nothing."""
    s = settings
    exclude = query.exclude_post_ids
    if exclude and not isinstance(exclude, set | frozenset):
        exclude = set(exclude)
    if query.is_video_request:
        kinds = [("videos", "videos_ts", s.serve_videos_per_author)]
    else:
        kinds = [("originals", "originals_ts", s.serve_originals_per_author),
                 ("secondary", "secondary_ts", s.serve_secondary_per_author)]
    out = _Segments()
    # A long exclude list: filter every followed author's lists (a scan of each);
    # a short one: look each excluded id up and leave a hole where it is.
    scan_all = bool(exclude) and len(exclude) > 4 * len(found)
    read: list[tuple[int, str, str]] = []  # (first segment, list, times) per kind
    for attr, ts_attr, k in kinds:
        if attr == "secondary":
            out.first_secondary = len(out.seqs)
        if not k:
            continue
        read.append((len(out.seqs), attr, ts_attr))
        seqs = list(map(attrgetter(attr), found))
        stamps = list(map(attrgetter(ts_attr), found))
        if scan_all:
            scan = s.max_scan_per_author
            for i, records in enumerate(seqs):
                seqs[i] = kept = _newest(records[-scan:], k, exclude)
                stamps[i] = array("d", map(_by_created, kept))
        out.seqs += seqs
        out.stamps += stamps
        out.caps.append(k)
        out.sizes.append(len(found))
    if exclude and not scan_all:
        out.holes = _holes(exclude, found, read, by_id)
    return out if out.seqs else None

def _holes(
    exclude: Collection[str], found: list[AuthorPosts],
    read: list[tuple[int, str, str]], by_id: dict[str, LightPost],
) -> list[tuple[int, int]]:
    """(segment, position) of each excluded post in the lists a query reads."""
    where: dict[str, list[int]] = {}  # author -> its indices in `found`
    for i, author in enumerate(found):
        where.setdefault(author.author_id, []).append(i)
    holes: list[tuple[int, int]] = []
    for pid in exclude:
        post = by_id.get(pid)
        if post is None:
            continue
        slots = where.get(post.author_id)
        if slots is None:
            continue
        author = found[slots[0]]
        for first, attr, ts_attr in read:
            at = position(getattr(author, attr), getattr(author, ts_attr), post)
            if at is not None:
                holes += [(first + i, at) for i in slots]
    return holes


_NO_INDICES = np.empty(0, dtype=np.intp)


class _Segments:
    """The lists a query reads: `seqs[i]` and its timestamps `stamps[i]`, in kind
    order then following order; `caps[j]` is the k of the j-th kind and `sizes[j]` its
    number of segments; replies and retweets start at segment `first_secondary`;
    `holes` are excluded posts still in the lists."""

    __slots__ = ("caps", "first_secondary", "holes", "seqs", "sizes", "stamps")

    def __init__(self) -> None:
        self.seqs: list[list[LightPost]] = []
        self.stamps: list[array[float]] = []
        self.caps: list[int] = []
        self.sizes: list[int] = []
        self.first_secondary = -1  # none
        self.holes: list[tuple[int, int]] = []  # (segment, position) of excluded posts


def _newest_first(times: np.ndarray, limit: int) -> Iterator[np.ndarray]:
    """Indices of `times`, newest first, in rounds: first the `limit` newest and some
    headroom (for replies the reply rule drops), then more on demand. A numpy
    partition and a sort of the round: a full sort of thousands is ~10x slower.

    A round also takes every post as new as its oldest, so a round ends strictly
    newer than the next begins and equal times keep index (candidate) order."""
    rest: np.ndarray | None = None  # indices not yet given out (None: all)
    m = min(len(times), limit + limit // 2)
    while True:
        pool = times if rest is None else times[rest]
        if m < len(pool):
            newest = pool >= np.partition(pool, len(pool) - m)[len(pool) - m]
            top = np.flatnonzero(newest)
            order = top[np.argsort(-pool[top], kind="stable")]
            later = np.flatnonzero(~newest)
            if rest is None:
                rest = later
            else:
                order, rest = rest[order], rest[later]
        else:
            order = np.argsort(-pool, kind="stable")
            if rest is not None:
                order = rest[order]
            rest = _NO_INDICES
        yield order
        if not len(rest):
            return
        m = min(len(rest), limit + limit // 2)


def _newest(posts: list[LightPost], k: int, exclude: Collection[str]) -> list[LightPost]:
    """The newest k posts not in `exclude`, oldest -> newest (the order of a slice)."""
    out = []
    for post in reversed(posts):
        if post.post_id not in exclude:
            out.append(post)
            if len(out) == k:
                break
    out.reverse()
    return out

