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
  * `serving` (serving.py): each author's slot and one row of its newest servable
    posts (times, records, id hashes), copied from the lists on every change to them:
    what a query reads, one row per followed author.

Rules
  * Retention (default two days): older creates are ignored; `trim()` drops expired
    posts, expired tombstones and authors left with nothing.
  * Video eligibility: an original (or quote) with a video; a retweet of a video post
    that is not a reply. Replies never. A video known to be shorter than
    `min_video_duration_s` never (nor a retweet of it).
  * Late parents: ingest keys messages by post id, so a parent often lands on another
    partition and arrives after its reply. Such a reply is stored at once and its create
    waits in `pending_replies` (by the missing parent or conversation root id, at most
    `max_pending_replies`); when that post arrives the reply's record is rebuilt with
    the context and replaced in place, so the reply rule can then admit it.
  * Creates dated more than `max_future_skew_s` ahead of the clock are refused (they
    would rank first and pin the freshness metric at 0).

Query (`query.py`): the caps take ~7,000 posts of 1,000 followed authors, and 800 are
returned, newest first (equal times in candidate order: originals, then replies and
retweets, each in following order, each author's oldest first), reading the followed
authors' serving rows and only the records returned; the serving caps and the reply
rule are described there.

Modules: `records.py` (the record, the per-author lists and their list operations),
`serving.py` (author slots and serving rows), `query.py` (the read side), this one
(writes, deletes, retention, late parents, and the scan that yields between chunks of
followed authors).

Thread-safety: one writer and the readers all run on one asyncio event loop. A query
yields between chunks of followed authors (only looking up their slots) and reads their
posts after the last yield, in one synchronous step, so rows and records are read in
step; a write between two chunks may only make the answer a few ms fresher. No lock is needed
because nothing here awaits; do not call the store from other threads.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Generator, Iterable

import numpy as np

from grebe.thunder.events import PostCreate, PostDelete, QuotedPostDelete, ThunderEvent
from grebe.thunder.query import select
from grebe.thunder.records import (
    AuthorPosts,
    InNetworkQuery,
    InNetworkResult,
    LightPost,
    build_record,
    insert_sorted,
    position,
    remove,
)
from grebe.thunder.serving import ServingRows
from grebe.thunder.settings import ThunderSettings

__all__ = ["InNetworkQuery", "InNetworkResult", "LightPost", "ThunderStore"]


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
        #: Each author's newest servable posts in one row (what a query reads).
        self.serving = ServingRows(s)
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
        record = build_record(event, posts, self.by_id, self._min_video_s)
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
                new = build_record(event, posts, self.by_id, self._min_video_s)
                main, times = posts.main_lists(old)
                at = position(main, times, old)
                if at is None:
                    continue
                main[at] = new
                self.by_id[new.post_id] = new
                self.serving.refresh(posts, posts.main_kind(new))
                self.resolved_replies += 1
                self._wait_for_context(event, new)  # e.g. found the parent, not the root
                if new.conversation_id is not None and new.post_id in self.pending_replies:
                    ready.append(new.post_id)


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
        serving = self.serving
        if posts is None:
            posts = self.authors[post.author_id] = AuthorPosts(post.author_id)
            serving.add(posts)
        if post.in_reply_to_post_id is None and post.source_post_id is None:
            main, times, cap = posts.originals, posts.originals_ts, self._cap_originals
            kind = "originals"
        else:
            main, times, cap = posts.secondary, posts.secondary_ts, self._cap_secondary
            kind = "secondary"
        if not times or times[-1] <= created:  # the usual case: the newest so far
            main.append(post)
            times.append(created)
            evicted = None
            if len(main) > cap:
                del times[0]
                evicted = main.pop(0)
            serving.appended(posts, kind, post, evicted is not None)
        else:
            inserted, evicted = insert_sorted(main, times, post, cap)
            if not inserted:
                del by_id[pid]
                self.ignored_creates += 1
                if posts.empty():
                    del self.authors[post.author_id]
                    serving.drop(posts)
                return False
            serving.refresh(posts, kind)
        videos_changed = post.video_eligible
        if evicted is not None:
            del by_id[evicted.post_id]
            if evicted.video_eligible:
                remove(posts.videos, posts.videos_ts, evicted)
                videos_changed = True
        if post.video_eligible:
            # A video evicted by the video cap stays in its main list and in by_id.
            insert_sorted(posts.videos, posts.videos_ts, post, self._cap_videos)
        if videos_changed:
            serving.refresh(posts, "videos")
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
            remove(*posts.main_lists(post), post)
            self.serving.refresh(posts, posts.main_kind(post))
            if post.video_eligible:
                remove(posts.videos, posts.videos_ts, post)
                self.serving.refresh(posts, "videos")
            if posts.empty():
                del self.authors[post.author_id]
                self.serving.drop(posts)
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
        by_id, serving = self.by_id, self.serving
        names = list(self.authors)
        for start in range(0, len(names), chunk):
            for name in names[start : start + chunk]:
                posts = self.authors.get(name)
                if posts is None:
                    continue
                for kind, main, times in (
                    ("originals", posts.originals, posts.originals_ts),
                    ("secondary", posts.secondary, posts.secondary_ts),
                ):
                    n = bisect_left(times, cutoff)
                    if n:
                        for old in main[:n]:
                            del by_id[old.post_id]
                        del main[:n]
                        del times[:n]
                        removed += n
                        serving.refresh(posts, kind)
                n = bisect_left(posts.videos_ts, cutoff)
                if n:
                    del posts.videos[:n]
                    del posts.videos_ts[:n]
                    serving.refresh(posts, "videos")
                if posts.empty():
                    del self.authors[name]
                    serving.drop(posts)
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

        The chunks only find the followed authors' slots; their posts are read after
        the last yield, in one synchronous step, so records and timestamps are read
        consistently (a write between chunks can only make the answer fresher; slots
        are looked up again if one was freed meanwhile, as it may be reused)."""
        started = time.perf_counter()
        s = self.settings
        deadline = started + query.budget_s if query.budget_s is not None else None
        following = query.following_user_ids
        serving = self.serving
        lookup = serving.index.lookup
        generation = serving.generation
        chunk = s.scan_chunk
        found: list[np.ndarray] = []  # slots, -1 for an author not held
        scanned = 0
        partial = False
        for start in range(0, len(following), chunk):
            if start:
                yield None
                if deadline is not None and time.perf_counter() > deadline:
                    partial = True
                    break
            found.append(lookup(following[start : start + chunk]))
            scanned = min(start + chunk, len(following))
        if serving.generation != generation:
            found = [lookup(following[:scanned])]
        slots = np.concatenate(found) if found else np.empty(0, dtype=np.intp)
        posts, candidates, authors = select(query, slots, serving, s.max_scan_per_author)
        return InNetworkResult(
            posts=posts,
            partial=partial,
            authors_scanned=scanned,
            candidates=candidates,
            authors=authors,
            elapsed_s=time.perf_counter() - started,
        )
