"""The in-network post store: recent posts of every author, newest first, in memory.

A home timeline asks "what did the 1,000 people I follow post lately?" thousands of
times a second. Answering from memory means one dict lookup per followed author and a
slice of a short, already-sorted list, instead of a database query.

Layout
  * `LightPost` — a compact record (a msgspec Struct with gc=False: ~128 bytes, never
    tracked by the garbage collector, so a million of them add no GC pauses; measured
    against tuples and __slots__ classes in bench/thunder.py).
  * per author, three lists kept oldest -> newest, each capped: originals (including
    quotes), secondary (replies and retweets), and videos (a view of the video-eligible
    posts of the other two). Plain lists: an empty list costs 56 bytes where a deque
    costs ~600. Beside each list, its posts' creation times in an `array('d')`, kept in
    step on every insert, eviction, delete and trim (and bisected by them).
  * `by_id` for deletes, `tombstones` so a deleted id is never served and a late or
    redelivered create for it is ignored.

Rules
  * Retention (default two days): older creates are ignored; `trim()` drops expired
    posts, expired tombstones and authors left with nothing.
  * Video eligibility: an original (or quote) with a video; a retweet of a video post
    that is not a reply. Replies never. A video known to be shorter than
    `min_video_duration_s` never (nor a retweet of it).
  * Scan cap: with excluded posts, the newest k not excluded are taken from the newest
    `max_scan_per_author` of each list only, so long exclude lists cost bounded work.
  * Replies are served only into a followed author's conversation: the conversation's
    root author is followed (or is the viewer), and the post replied to is by a
    followed author, the viewer, or the replier (a self-thread).
  * Serving caps: of each followed author, the newest `serve_originals_per_author`
    originals and the newest `serve_secondary_per_author` replies/retweets are taken
    (excluded ids skipped first); replies among those that break the reply rule are
    then dropped.
  * Late parents: ingest keys messages by post id, so a parent often lands on another
    partition and arrives after its reply. Such a reply is stored at once and its create
    waits in `pending_replies` (by the missing parent or conversation root id, at most
    `max_pending_replies`); when that post arrives the reply's record is rebuilt with
    the context and replaced in place, so the reply rule can then admit it.
  * Creates dated more than `max_future_skew_s` ahead of the clock are refused (they
    would rank first and pin the freshness metric at 0).

Query: the caps take ~7,000 posts of 1,000 followed authors, and 800 are returned,
newest first (equal times in candidate order: originals, then replies and retweets, each
in following order, each author's oldest first). It joins the followed authors'
timestamp arrays into one numpy array, marks each author's newest k (and the holes
excluded ids leave), partitions out the newest, and only then reads records: the ones
returned, plus the replies checked against the reply rule on the way. Reading every
candidate record (scattered in memory) was most of the cost before (bench/thunder.py,
docs/benchmarks.md).

Thread-safety: one writer and the readers all run on one asyncio event loop. A query
yields between chunks of followed authors (only looking them up) and reads their posts
after the last yield, in one synchronous step, so lists and timestamps are read in step;
a write between two chunks may only make the answer a few ms fresher. No lock is needed
because nothing here awaits; do not call the store from other threads.
"""

from __future__ import annotations

import sys
import time
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import (
    Callable,
    Collection,
    Generator,
    Iterable,
    Iterator,
    Sequence,
)
from operator import attrgetter

import msgspec
import numpy as np

from grebe.thunder.events import PostCreate, PostDelete, QuotedPostDelete, ThunderEvent
from grebe.thunder.settings import ThunderSettings


class LightPost(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    post_id: str
    author_id: str
    created_at: float
    in_reply_to_post_id: str | None = None
    in_reply_to_author_id: str | None = None
    conversation_id: str | None = None
    conversation_author_id: str | None = None
    source_post_id: str | None = None  # the retweeted post
    source_author_id: str | None = None
    quote_of_post_id: str | None = None
    has_video: bool = False
    video_eligible: bool = False

    @property
    def is_reply(self) -> bool:
        return self.in_reply_to_post_id is not None

    @property
    def is_retweet(self) -> bool:
        return self.source_post_id is not None


class InNetworkQuery(msgspec.Struct, kw_only=True):
    user_id: str
    following_user_ids: Sequence[str]
    exclude_post_ids: Collection[str] = ()
    max_results: int = 800
    is_video_request: bool = False
    budget_s: float | None = None  # stop scanning after this and return what was found


class InNetworkResult(msgspec.Struct, kw_only=True):
    posts: list[LightPost]
    partial: bool = False  # the time budget ran out before every author was scanned
    authors_scanned: int = 0
    candidates: int = 0  # posts taken under the per-author caps (before the reply rule)
    elapsed_s: float = 0.0


_by_created = attrgetter("created_at")
_new_times = array("d").__copy__  # 3x faster than array("d"); one per list per author


class AuthorPosts:
    """One author's posts, each list oldest -> newest, beside the creation times of its
    posts in an `array('d')` (`*_ts`): a query reads and orders raw doubles and touches
    only the records it returns."""

    __slots__ = (
        "author_id", "originals", "originals_ts", "secondary", "secondary_ts", "videos",
        "videos_ts",
    )

    def __init__(self, author_id: str) -> None:
        self.author_id = author_id  # the interned id: one string for all the records
        self.originals: list[LightPost] = []
        self.originals_ts = _new_times()
        self.secondary: list[LightPost] = []  # replies and retweets
        self.secondary_ts = _new_times()
        self.videos: list[LightPost] = []
        self.videos_ts = _new_times()

    def main_lists(self, post: LightPost) -> tuple[list[LightPost], array[float]]:
        if post.in_reply_to_post_id is not None or post.source_post_id is not None:
            return self.secondary, self.secondary_ts
        return self.originals, self.originals_ts

    def empty(self) -> bool:
        return not (self.originals or self.secondary or self.videos)


class ThunderStore:
    """Recent posts per author under per-author caps; see the module docstring."""

    def __init__(
        self, settings: ThunderSettings | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.settings = s = settings or ThunderSettings()
        self.clock = clock
        self.by_id: dict[str, LightPost] = {}
        self.tombstones: dict[str, float] = {}  # post id -> when it was deleted
        self.authors: dict[str, AuthorPosts] = {}
        self.newest_created_at = 0.0
        self.ignored_creates = 0  # duplicates, tombstoned, expired, or beyond a cap
        self.future_refused = 0  # creates dated beyond `max_future_skew_s` from now
        #: parent (or conversation root) id -> creates of the replies waiting for it.
        self.pending_replies: dict[str, list[PostCreate]] = {}
        self._pending_count = 0
        self.resolved_replies = 0  # replies whose context was filled after they arrived
        self._max_pending = s.max_pending_replies
        self._max_future_s = s.max_future_skew_s
        self._min_video_s = s.min_video_duration_s
        # Read on every insert: plain attributes, not pydantic lookups.
        self._retention_s = s.retention_s
        self._cap_originals = s.max_originals_per_author
        self._cap_secondary = s.max_secondary_per_author
        self._cap_videos = s.max_videos_per_author

    # ---- sizes -------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.by_id)

    def __contains__(self, post_id: object) -> bool:
        return post_id in self.by_id

    @property
    def author_count(self) -> int:
        return len(self.authors)

    @property
    def pending_count(self) -> int:
        """Replies waiting for a parent or conversation root to arrive."""
        return self._pending_count

    def get(self, post_id: str) -> LightPost | None:
        return self.by_id.get(post_id)

    def is_deleted(self, post_id: str) -> bool:
        return post_id in self.tombstones

    # ---- writes ------------------------------------------------------------------

    def apply(self, event: ThunderEvent, now: float | None = None) -> bool:
        """Apply one event; False when it changed nothing (duplicate, late, unknown)."""
        if isinstance(event, PostCreate):
            return self._create(event, now)
        if isinstance(event, PostDelete | QuotedPostDelete):
            return self.delete(event.post_id, deleted_at=event.deleted_at or None)
        raise TypeError(f"not a thunder event: {type(event).__name__}")

    def apply_many(self, events: Iterable[ThunderEvent]) -> int:
        """Apply a batch (reading the clock once); returns how many changed the store."""
        now = self.clock()
        create, apply = self._create, self.apply
        changed = 0
        for event in events:
            if type(event) is PostCreate:  # the bulk of a stream: skip the dispatch
                changed += create(event, now)
            else:
                changed += apply(event, now)
        return changed

    def _create(self, event: PostCreate, now: float | None) -> bool:
        """Insert a create; a reply whose parent (or conversation root) is not held yet
        waits for it, and replies waiting for this post get their context now."""
        posts = self.authors.get(event.author_id)
        record = self._record(event, posts)
        if not self._insert(record, now, posts):
            return False
        if record.in_reply_to_post_id is not None:
            self._wait_for_context(event, record)
        if self.pending_replies and record.post_id in self.pending_replies:
            self._resolve_waiting(record.post_id)
        return True

    def _missing_context(self, record: LightPost) -> str | None:
        """The id of the post a reply still needs (its parent, else its conversation
        root) to know whom it replies to and whose conversation it is in."""
        if record.in_reply_to_author_id is not None and record.conversation_author_id:
            return None
        parent = record.in_reply_to_post_id
        if parent is not None and (parent not in self.by_id or record.conversation_id is None):
            return parent  # absent, or itself waiting to learn its conversation
        if record.conversation_author_id is None and record.conversation_id is not None:
            return record.conversation_id if record.conversation_id not in self.by_id else None
        return None

    def _wait_for_context(self, event: PostCreate, record: LightPost) -> None:
        missing = self._missing_context(record)
        if missing is None or not self._max_pending:
            return
        self.pending_replies.setdefault(missing, []).append(event)
        self._pending_count += 1
        while self._pending_count > self._max_pending:  # drop the longest-waiting parent
            oldest = next(iter(self.pending_replies))
            self._pending_count -= len(self.pending_replies.pop(oldest))

    def _resolve_waiting(self, post_id: str) -> None:
        """Rebuild the records of the replies waiting for `post_id`, in place; a reply
        that learns its conversation passes it on to the replies waiting for it."""
        ready = [post_id]
        while ready:
            waiting = self.pending_replies.pop(ready.pop(), [])
            self._pending_count -= len(waiting)
            for event in waiting:
                old = self.by_id.get(event.post_id)
                posts = self.authors.get(event.author_id)
                if old is None or posts is None:  # deleted, evicted or expired meanwhile
                    continue
                new = self._record(event, posts)
                main, times = posts.main_lists(old)
                at = _position(main, times, old)
                if at is None:
                    continue
                main[at] = new
                self.by_id[new.post_id] = new
                self.resolved_replies += 1
                self._wait_for_context(event, new)  # e.g. found the parent, not the root
                if new.conversation_id is not None and new.post_id in self.pending_replies:
                    ready.append(new.post_id)

    def record_for(self, event: PostCreate) -> LightPost:
        """Build the record, filling reply/retweet context from posts already held."""
        return self._record(event, self.authors.get(event.author_id))

    def _record(self, event: PostCreate, posts: AuthorPosts | None) -> LightPost:
        by_id = self.by_id
        parent_author = event.in_reply_to_author_id
        conversation = event.conversation_id
        conversation_author = event.conversation_author_id
        if event.in_reply_to_post_id is not None:
            parent = by_id.get(event.in_reply_to_post_id)
            if parent is not None:
                parent_author = parent_author or parent.author_id
                # A parent that is itself a reply of unknown conversation is not a root.
                parent_root = parent.conversation_id or (
                    parent.post_id if parent.in_reply_to_post_id is None else None)
                conversation = conversation or parent_root
                if conversation_author is None:
                    conversation_author = (
                        parent.author_id
                        if conversation == parent.post_id
                        else parent.conversation_author_id
                    )
            if conversation_author is None and conversation is not None:
                root = by_id.get(conversation)
                conversation_author = root.author_id if root is not None else None
        elif conversation is None or conversation == event.post_id:
            conversation, conversation_author = event.post_id, event.author_id

        has_video = event.has_video
        long_enough = (event.video_duration_s is None
                       or event.video_duration_s >= self._min_video_s)
        source_author = event.retweet_of_author_id
        if event.retweet_of_post_id is not None:
            source_is_reply = event.source_is_reply
            source = by_id.get(event.retweet_of_post_id)
            if source is not None:
                source_author = source_author or source.author_id
                has_video = has_video or source.has_video
                source_is_reply = source.in_reply_to_post_id is not None
                # The source's own eligibility already judged its video's length.
                long_enough = long_enough and (source.video_eligible or not source.has_video)
            eligible = has_video and source_is_reply is False and long_enough
        else:
            eligible = has_video and event.in_reply_to_post_id is None and long_enough
        intern = sys.intern
        # A known author's id is already interned (it keys `authors`): no second lookup.
        author = posts.author_id if posts is not None else intern(event.author_id)
        return LightPost(
            post_id=event.post_id,
            author_id=author,
            created_at=event.created_at,
            in_reply_to_post_id=event.in_reply_to_post_id,
            in_reply_to_author_id=parent_author and intern(parent_author),
            conversation_id=conversation,
            conversation_author_id=(
                author if conversation_author == author
                else conversation_author and intern(conversation_author)
            ),
            source_post_id=event.retweet_of_post_id,
            source_author_id=source_author and intern(source_author),
            quote_of_post_id=event.quote_of_post_id,
            has_video=has_video,
            video_eligible=eligible,
        )

    def insert(self, post: LightPost, now: float | None = None) -> bool:
        return self._insert(post, now, self.authors.get(post.author_id))

    def _insert(self, post: LightPost, now: float | None, posts: AuthorPosts | None) -> bool:
        """Insert `post`; `posts` is `authors.get(post.author_id)`, already looked up."""
        pid = post.post_id
        created = post.created_at
        by_id = self.by_id
        if now is None:
            now = self.clock()
        if created > now + self._max_future_s:
            self.future_refused += 1
            return False
        if (
            pid in self.tombstones
            or created < now - self._retention_s
            or by_id.setdefault(pid, post) is not post  # a duplicate; else claims the id
        ):
            self.ignored_creates += 1
            return False
        if posts is None:
            posts = self.authors[post.author_id] = AuthorPosts(post.author_id)
        if post.in_reply_to_post_id is None and post.source_post_id is None:
            main, times, cap = posts.originals, posts.originals_ts, self._cap_originals
        else:
            main, times, cap = posts.secondary, posts.secondary_ts, self._cap_secondary
        if not times or times[-1] <= created:  # the usual case: the newest so far
            main.append(post)
            times.append(created)
            evicted = None
            if len(main) > cap:
                del times[0]
                evicted = main.pop(0)
        else:
            inserted, evicted = _insert_sorted(main, times, post, cap)
            if not inserted:
                del by_id[pid]
                self.ignored_creates += 1
                if posts.empty():
                    del self.authors[post.author_id]
                return False
        if evicted is not None:
            del by_id[evicted.post_id]
            if evicted.video_eligible:
                _remove(posts.videos, posts.videos_ts, evicted)
        if post.video_eligible:
            # A video evicted by the video cap stays in its main list and in by_id.
            _insert_sorted(posts.videos, posts.videos_ts, post, self._cap_videos)
        if created > self.newest_created_at:
            self.newest_created_at = created
        return True

    def delete(self, post_id: str, deleted_at: float | None = None) -> bool:
        """Tombstone `post_id` and drop it; True when a stored post was removed."""
        self.tombstones[post_id] = deleted_at or self.clock()
        post = self.by_id.pop(post_id, None)
        if post is None:
            return False
        posts = self.authors.get(post.author_id)
        if posts is not None:
            _remove(*posts.main_lists(post), post)
            if post.video_eligible:
                _remove(posts.videos, posts.videos_ts, post)
            if posts.empty():
                del self.authors[post.author_id]
        return True

    def trim(self, now: float | None = None) -> int:
        """Drop expired posts, tombstones and empty authors; returns posts removed."""
        removed = 0
        for removed in self.trim_steps(now):  # noqa: B007 - the last value is the total
            pass
        return removed

    def trim_steps(
        self, now: float | None = None, chunk: int = 4096
    ) -> Generator[int, None, None]:
        """Trim in steps of `chunk` authors, yielding the running count between them,
        so an async caller lets queries run during the trim of a large store."""
        cutoff = (now if now is not None else self.clock()) - self.settings.retention_s
        removed = 0
        by_id = self.by_id
        names = list(self.authors)
        for start in range(0, len(names), chunk):
            for name in names[start : start + chunk]:
                posts = self.authors.get(name)
                if posts is None:
                    continue
                for main, times in (
                    (posts.originals, posts.originals_ts),
                    (posts.secondary, posts.secondary_ts),
                ):
                    n = bisect_left(times, cutoff)
                    if n:
                        for old in main[:n]:
                            del by_id[old.post_id]
                        del main[:n]
                        del times[:n]
                        removed += n
                n = bisect_left(posts.videos_ts, cutoff)
                del posts.videos[:n]
                del posts.videos_ts[:n]
                if posts.empty():
                    del self.authors[name]
            yield removed
        expired = [pid for pid, at in self.tombstones.items() if at < cutoff]
        for pid in expired:
            del self.tombstones[pid]
        for parent, waiting in list(self.pending_replies.items()):
            kept = [e for e in waiting if e.created_at >= cutoff and e.post_id in by_id]
            self._pending_count -= len(waiting) - len(kept)
            if kept:
                self.pending_replies[parent] = kept
            else:
                del self.pending_replies[parent]
        yield removed

    # ---- reads -------------------------------------------------------------------

    def get_in_network_posts(self, query: InNetworkQuery) -> InNetworkResult:
        """The query, run to the end (or until its budget) without yielding."""
        scan = self.scan(query)
        try:
            while True:
                next(scan)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def scan(self, query: InNetworkQuery) -> Generator[None, None, InNetworkResult]:
        """Newest-first posts of the followed authors under the per-author caps.

        A generator that yields after every `scan_chunk` authors: the async service
        awaits between chunks (so other requests and ingest interleave) and the time
        budget is checked there. Returns partial results when the budget runs out.

        The chunks only find the followed authors; their posts are read after the last
        yield, in one synchronous step, so records and timestamps are read consistently
        (a write between chunks can only make the answer fresher)."""
        started = time.perf_counter()
        s = self.settings
        deadline = started + query.budget_s if query.budget_s is not None else None
        following = query.following_user_ids
        get = self.authors.get
        chunk = s.scan_chunk
        found: list[AuthorPosts] = []
        scanned = 0
        partial = False
        for start in range(0, len(following), chunk):
            if start:
                yield None
                if deadline is not None and time.perf_counter() > deadline:
                    partial = True
                    break
            found += [p for p in map(get, following[start : start + chunk]) if p is not None]
            scanned = min(start + chunk, len(following))
        posts, candidates = self._select(query, found)
        return InNetworkResult(
            posts=posts,
            partial=partial,
            authors_scanned=scanned,
            candidates=candidates,
            elapsed_s=time.perf_counter() - started,
        )

    def _select(
        self, query: InNetworkQuery, found: list[AuthorPosts]
    ) -> tuple[list[LightPost], int]:
        """The `max_results` newest posts under the per-author caps, newest first, and
        how many posts the caps took (before the reply rule)."""
        limit = query.max_results
        segments = self._segments(query, found)
        if segments is None or limit <= 0:
            return [], 0
        lens = np.fromiter(map(len, segments.stamps), dtype=np.intp,
                           count=len(segments.stamps))
        ends = np.cumsum(lens)
        starts = ends - lens
        total = int(ends[-1])
        if not total:
            return [], 0
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
                & (ends[segment_of] - np.arange(total) <= self.settings.max_scan_per_author))
        else:
            # The newest k of each segment: at most k from its end.
            picked = np.flatnonzero(ends[segment_of] - np.arange(total) <= k_of)
        seqs, first_secondary = segments.seqs, segments.first_secondary
        allowed: set[str] | None = None
        out: list[LightPost] = []
        append = out.append
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
                if len(out) == limit:
                    return out, len(picked)
        return out, len(picked)

    def _segments(self, query: InNetworkQuery, found: list[AuthorPosts]) -> _Segments | None:
        """One segment per (kind, followed author): its record list and timestamps
        (the author's own array, not a copy; a filtered copy for an author with an
        excluded post). None when the caps take nothing."""
        s = self.settings
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
            out.holes = self._holes(exclude, found, read)
        return out if out.seqs else None

    def _holes(
        self, exclude: Collection[str], found: list[AuthorPosts],
        read: list[tuple[int, str, str]],
    ) -> list[tuple[int, int]]:
        """(segment, position) of each excluded post in the lists a query reads."""
        where: dict[str, list[int]] = {}  # author -> its indices in `found`
        for i, author in enumerate(found):
            where.setdefault(author.author_id, []).append(i)
        by_id = self.by_id
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
                at = _position(getattr(author, attr), getattr(author, ts_attr), post)
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


def _insert_sorted(
    posts: list[LightPost], times: array[float], post: LightPost, cap: int
) -> tuple[bool, LightPost | None]:
    """Insert keeping oldest -> newest (and `times` in step); returns (inserted, the
    post evicted by the cap)."""
    created = post.created_at
    if not times or times[-1] <= created:
        posts.append(post)  # the usual case: the newest so far
        times.append(created)
    elif len(times) >= cap and created < times[0]:
        return False, None  # older than everything kept: beyond the cap already
    else:
        i = bisect_right(times, created)
        posts.insert(i, post)
        times.insert(i, created)
    if len(posts) > cap:
        del times[0]
        return True, posts.pop(0)
    return True, None


def _position(posts: list[LightPost], times: array[float], post: LightPost) -> int | None:
    """Where `post` (by identity) is in `posts`: a bisect to the posts created at the
    same time, then a scan of those, newest first."""
    created = post.created_at
    for i in range(bisect_right(times, created) - 1, bisect_left(times, created) - 1, -1):
        if posts[i] is post:
            return i
    return None


def _remove(posts: list[LightPost], times: array[float], post: LightPost) -> None:
    i = _position(posts, times, post)
    if i is not None:
        del posts[i]
        del times[i]
