"""The thunder store's records and per-author lists, and the list operations on them.

`LightPost` is a compact record: a msgspec Struct with gc=False (~128 bytes, never
tracked by the garbage collector, so a million of them add no GC pauses; measured
against tuples and __slots__ classes in bench/thunder.py). `AuthorPosts` holds one
author's lists, oldest -> newest, each beside an `array('d')` of its posts' creation
times kept in step, so a query orders raw doubles and touches only the records it
returns, and inserts, evictions and deletes bisect instead of scanning.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Sequence

import msgspec

from grebe.thunder.events import PostCreate


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
    authors: int = 0  # distinct authors among `posts` (for the request statistics)
    elapsed_s: float = 0.0


new_times = array("d").__copy__  # 3x faster than array("d"); one per list per author


class AuthorPosts:
    """One author's posts, each list oldest -> newest, beside the creation times of its
    posts in an `array('d')` (`*_ts`): a query reads and orders raw doubles and touches
    only the records it returns."""

    __slots__ = (
        "author_id", "originals", "originals_ts", "secondary", "secondary_ts", "slot",
        "videos", "videos_ts",
    )

    def __init__(self, author_id: str) -> None:
        self.author_id = author_id  # the interned id: one string for all the records
        self.originals: list[LightPost] = []
        self.originals_ts = new_times()
        self.secondary: list[LightPost] = []  # replies and retweets
        self.secondary_ts = new_times()
        self.videos: list[LightPost] = []
        self.videos_ts = new_times()
        self.slot = -1  # its rows in the serving tables (serving.py); set by the store

    def main_lists(self, post: LightPost) -> tuple[list[LightPost], array[float]]:
        if post.in_reply_to_post_id is not None or post.source_post_id is not None:
            return self.secondary, self.secondary_ts
        return self.originals, self.originals_ts

    @staticmethod
    def main_kind(post: LightPost) -> str:
        """The name of the list of `post`'s kind (its attribute): "originals" or
        "secondary"."""
        if post.in_reply_to_post_id is not None or post.source_post_id is not None:
            return "secondary"
        return "originals"

    def empty(self) -> bool:
        return not (self.originals or self.secondary or self.videos)


def build_record(
    event: PostCreate, posts: AuthorPosts | None, by_id: dict[str, LightPost],
    min_video_s: float,
) -> LightPost:
    """Build the record of a create, filling reply/retweet context from posts already
    held (`by_id`); `posts` is the author's lists, when the author is known."""
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
                   or event.video_duration_s >= min_video_s)
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


def insert_sorted(
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


def position(posts: list[LightPost], times: array[float], post: LightPost) -> int | None:
    """Where `post` (by identity) is in `posts`: a bisect to the posts created at the
    same time, then a scan of those, newest first."""
    created = post.created_at
    for i in range(bisect_right(times, created) - 1, bisect_left(times, created) - 1, -1):
        if posts[i] is post:
            return i
    return None


def remove(posts: list[LightPost], times: array[float], post: LightPost) -> None:
    i = position(posts, times, post)
    if i is not None:
        del posts[i]
        del times[i]
