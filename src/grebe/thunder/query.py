"""The read side of the thunder store: which posts a query takes, and in what order.

Serving caps: of each followed author, the newest `serve_originals_per_author` originals
and the newest `serve_secondary_per_author` replies/retweets are taken (excluded ids
skipped first, from the newest `max_scan_per_author` of each list only); replies among
those that break the reply rule are then dropped. Replies are served only into a
followed author's conversation: the conversation's root author is followed (or is the
viewer), and the post replied to is by a followed author, the viewer, or the replier (a
self-thread).

How: the followed authors' rows of the serving table (serving.py: each author's newest
2k of each kind: times, id hashes and records) are fancy-indexed by slot in one step;
excluded posts found in them (by hash, then confirmed by id) leave holes, each row
gives its newest k, and a row left with fewer than k of a kind while its author's
list has more is rebuilt from that list; the newest are partitioned out, and only then
are records read: the ones returned, plus the replies checked against the reply rule
on the way. Candidates are in the order originals, then
replies and retweets, each in following order, each author's oldest first: equal times
keep that order. Reading each author's own lists (~10 scattered reads an author) was
most of the cost before (bench/thunder.py, docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

import numpy as np

from grebe.thunder.records import AuthorPosts, InNetworkQuery, LightPost
from grebe.thunder.serving import NONE, ServingRows, ServingTable


def select(
    query: InNetworkQuery, slots: np.ndarray, serving: ServingRows, max_scan: int,
) -> tuple[list[LightPost], int, int]:
    """The `max_results` newest posts under the per-author caps, newest first, how
    many posts the caps took (before the reply rule), and how many distinct authors
    the posts have. `slots` are the followed authors' slots (-1: not held)."""
    limit = query.max_results
    table = serving.videos if query.is_video_request else serving.main
    held = slots[slots >= 0]
    if limit <= 0 or not len(held) or not table.width:
        return [], 0, 0
    width = table.width
    exclude = query.exclude_post_ids
    if exclude and not isinstance(exclude, set | frozenset):
        exclude = set(exclude)
    # (authors, width): one stretch of memory read per author.
    times, places, hashes = table.rows(held, hashes=bool(exclude))
    rebuilt = _Rebuilt(len(table.records))
    if exclude:
        assert hashes is not None
        _exclude(exclude, held, table, times, places, hashes, serving.owners, rebuilt,
                 max_scan)
    # Kind by kind (originals, then replies and retweets), each in following order,
    # each author's oldest first: the newest k places of each row that hold a post.
    every: list[np.ndarray] = []
    where: list[np.ndarray] = []
    first_secondary = -1  # candidates from here on are replies and retweets
    for attr, o, k, w in table.parts:
        if attr == "secondary":
            first_secondary = sum(len(part) for part in every)
        block = times[:, o : o + w]
        if exclude:
            keep = block != NONE
            taken = keep & (np.cumsum(keep[:, ::-1], axis=1)[:, ::-1] <= k)
            every.append(block[taken])
            where.append(places[:, o : o + w][taken])
        else:
            every.append(block[:, w - k :].ravel())
            where.append(places[:, o + w - k : o + w].ravel())
    every_time, every_place = np.concatenate(every), np.concatenate(where)
    picked = np.flatnonzero(every_time != NONE)
    if first_secondary < 0:
        first_secondary = len(every_time)
    records = table.records
    stored = rebuilt.start
    allowed: set[str] | None = None
    out: list[LightPost] = []
    out_places: list[int] = []
    for order in _newest_first(every_time[picked], limit):
        taken_now = picked[order]
        at = every_place[taken_now].tolist()
        # The round's records read in C (a Python loop over ~1,000 posts with two
        # appends and a length check each was most of a query's CPU); only replies
        # and retweets are then looked at one by one, for the reply rule.
        if rebuilt.records:
            posts = [records[p] if p < stored else rebuilt.records[p - stored] for p in at]
        else:
            posts = list(map(records.__getitem__, at))
        drop: list[int] = []
        for i in np.flatnonzero(taken_now >= first_secondary).tolist():
            post = posts[i]
            assert post is not None  # a place with a time holds a record
            if post.in_reply_to_post_id is None:
                continue
            if allowed is None:
                allowed = set(query.following_user_ids)
                allowed.add(query.user_id)
            # Replies only into a followed author's conversation: the root author is
            # followed (or the viewer), and so is the author replied to (or it is a
            # self-thread).
            if post.conversation_author_id not in allowed or (
                post.in_reply_to_author_id not in allowed
                and post.in_reply_to_author_id != post.author_id
            ):
                drop.append(i)
        if drop:
            dropped = set(drop)
            kept = [i for i in range(len(posts)) if i not in dropped]
            posts = [posts[i] for i in kept]
            at = [at[i] for i in kept]
        room = limit - len(out)
        out += posts[:room]
        out_places += at[:room]
        if len(out) == limit:
            break
    return out, len(picked), rebuilt.authors(out_places, width)


def _id_of(post: LightPost | None) -> str | None:
    return post.post_id if post is not None else None


class _Rebuilt:
    """Records of the rows a query rebuilt from an author's lists (more excluded posts
    than a row has room for): `places` point to them from `start` (past the table's
    own places) on; `slots` is each one's author's slot."""

    __slots__ = ("records", "slots", "start")

    def __init__(self, start: int) -> None:
        self.start = start
        self.records: list[LightPost | None] = []
        self.slots: list[int] = []

    def authors(self, out_places: list[int], width: int) -> int:
        """Distinct authors of the posts at these places, counted by slot (a place's
        row), not by each post's author id string: reading 800 of those, scattered in
        memory, cost ~0.4 ms per answer on a loaded box (docs/benchmarks.md)."""
        if not self.records:
            if not out_places:
                return 0
            # Marked in a mask of slots, not np.unique (a sort): 0.015 against 0.053 ms
            # for 1,000 places (one-off).
            rows = np.array(out_places, dtype=np.intp) // width
            held = np.zeros(int(rows.max()) + 1, dtype=bool)
            held[rows] = True
            return int(np.count_nonzero(held))
        start = self.start
        return len({p // width if p < start else self.slots[p - start] for p in out_places})


def _exclude(
    exclude: Collection[str], held: np.ndarray, table: ServingTable, times: np.ndarray,
    places: np.ndarray, hashes: np.ndarray, owners: list[AuthorPosts | None],
    rebuilt: _Rebuilt, max_scan: int,
) -> None:
    """Leave holes in `times` where the followed rows hold an excluded post, and only
    the newest `max_scan` places of each kind; a row left with fewer than k posts of a
    kind is rebuilt from its author's list (its newest k not excluded, of the newest
    `max_scan`), pointing `places` at `rebuilt`.

    Excluded ids are found by hash in numpy (the rows carry their posts' id hashes),
    and only a match's record is read to confirm it: looking each excluded id up
    in the store would cost ~1 us each, and a seen list holds up to `max_excluded`."""
    records = table.records
    # As the rows hold them: Python's int -> float (numpy's cast could round apart).
    wanted = np.fromiter(map(float, map(hash, exclude)), dtype=np.float64,
                         count=len(exclude))
    rows, cols = np.nonzero(np.isin(hashes, wanted) & (times != NONE))
    # A place with a time holds a record; a matching hash is confirmed by its id.
    confirmed = np.fromiter(
        (_id_of(records[at]) in exclude for at in places[rows, cols].tolist()),
        dtype=bool, count=len(rows))
    holed = np.zeros(times.shape, dtype=bool)
    holed[rows[confirmed], cols[confirmed]] = True
    # A full row may have older posts in its author's list (within `max_scan`).
    full = {o: times[:, o] != NONE for _, o, _, w in table.parts if w < max_scan}
    times[holed] = NONE
    for attr, o, k, w in table.parts:
        if w > max_scan:  # only the newest `max_scan` are looked at
            times[:, o : o + w - max_scan] = NONE
        if o not in full:
            continue
        block = times[:, o : o + w]
        short = (full[o] & holed[:, o : o + w].any(axis=1)
                 & ((block != NONE).sum(axis=1) < k))
        for row in np.flatnonzero(short).tolist():
            slot = int(held[row])
            posts = owners[slot]
            assert posts is not None  # a followed slot has an author
            kept = _newest(getattr(posts, attr)[-max_scan:], k, exclude)
            pad = w - len(kept)
            block[row] = [NONE] * pad + [p.created_at for p in kept]
            start = rebuilt.start + len(rebuilt.records)
            places[row, o : o + w] = range(start, start + w)
            rebuilt.records += [None] * pad
            rebuilt.records += kept
            rebuilt.slots += [slot] * w


_NO_INDICES = np.empty(0, dtype=np.intp)


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

