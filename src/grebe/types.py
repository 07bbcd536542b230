"""The vocabulary of grebe: posts, users, payloads, results and annotations.

Everything here is a `msgspec.Struct`, so a message is validated and decoded from JSON
in one pass (`grebe.codec`) and crosses process boundaries cheaply. This module imports
nothing else from grebe.
"""

from __future__ import annotations

import enum
import time
from typing import Annotated, Any, Literal

import msgspec

# Integers a producer sends are bounded to what every encoder downstream (msgpack for the
# engine IPC, SQLite, PostgreSQL BIGINT) can hold: an out-of-range count is the message's
# own fault and fails at decode, never later in a batch with other posts.
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


#: An eligibility: the name a stream gives its posts to pick the plans they run. Plain
#: strings on the wire; the names grebe ships plans for are the flows each flow module
#: declares (grebe.flows.catalog), and a stream naming one no plan serves fails at start.
Eligibility = str


class Media(msgspec.Struct, frozen=True, kw_only=True):
    """One attached image or video. Sizes and durations are what the poster's client
    reported; hydration re-checks them against the fetched bytes."""

    kind: Literal["image", "video"]
    url: str
    size_bytes: Int64 | None = None
    width: Int64 | None = None
    height: Int64 | None = None
    duration_s: float | None = None
    view_count: Int64 = 0


class Card(msgspec.Struct, frozen=True, kw_only=True):
    """A link preview attached to a post (what the reader sees of a URL)."""

    url: str
    title: str = ""
    description: str = ""


class Post(msgspec.Struct, frozen=True, kw_only=True):
    """A post. Only `id` is required: a message carrying just ids (`{"post": {"id": "1"}}`,
    or a reply without its parent) is filled in by hydration (`grebe.hydration`) before
    plans run. Every field added since the first version is optional with a default, so
    every message an earlier version wrote still decodes (tests/test_schema_evolution.py).
    """

    id: str
    author_id: str = ""  # empty: not known yet (an id-only message, until hydrated)
    text: str = ""
    lang: str | None = None
    created_at: float = 0.0  # epoch seconds
    reply_to_post_id: str | None = None
    quote_of_post_id: str | None = None
    retweet_of_post_id: str | None = None
    conversation_id: str | None = None
    media: tuple[Media, ...] = ()
    like_count: Int64 = 0
    reply_count: Int64 = 0
    repost_count: Int64 = 0
    view_count: Int64 = 0
    quote_count: Int64 = 0
    bookmark_count: Int64 = 0
    quoted_post: Post | None = None  # the post quoted (quote_of_post_id), when known
    ancestor_ids: tuple[str, ...] = ()  # the thread above a reply: root first, parent last
    urls: tuple[str, ...] = ()  # expanded links in the text
    cards: tuple[Card, ...] = ()
    safety_labels: tuple[str, ...] = ()  # labels the platform already applied

    @property
    def is_stub(self) -> bool:
        """Only ids are known (no author): hydration must load the rest."""
        return not self.author_id

    @property
    def root_post_id(self) -> str | None:
        """The thread's first post: the conversation id, else the first ancestor."""
        if self.conversation_id and self.conversation_id != self.id:
            return self.conversation_id
        if self.ancestor_ids and self.ancestor_ids[0] != self.id:
            return self.ancestor_ids[0]
        return None

    @property
    def is_reply(self) -> bool:
        return self.reply_to_post_id is not None

    @property
    def is_retweet(self) -> bool:
        return self.retweet_of_post_id is not None

    @property
    def images(self) -> tuple[Media, ...]:
        return tuple(m for m in self.media if m.kind == "image")

    @property
    def videos(self) -> tuple[Media, ...]:
        return tuple(m for m in self.media if m.kind == "video")


UserTier = Literal["free", "trial", "hobby", "creator", "paid", "viral"]


class User(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    handle: str = ""
    tier: UserTier = "free"
    follower_count: Int64 = 0
    following_count: Int64 = 0
    verified: bool = False
    created_at: float = 0.0
    protected: bool = False  # posts visible to followers only
    name: str = ""
    bio: str = ""
    country: str | None = None  # ISO 3166-1 alpha-2
    language: str | None = None  # ISO 639-1, the account's language
    # Named risk signals in [0, 1] the platform knows of the account (new account,
    # prior enforcement, ...): what Grox's filters and prompts read beside the post.
    risk_signals: dict[str, float] = {}


class UserContext(msgspec.Struct, frozen=True, kw_only=True):
    """What a plan may need beyond the post itself: the author, the post replied to
    (reply ranking scores a reply against it), the thread's root, their authors, the
    author's recent posts, and free-form extras from the producer. A producer may send
    any of it; hydration fills what is missing."""

    author: User | None = None
    parent: Post | None = None
    root: Post | None = None
    parent_author: User | None = None
    root_author: User | None = None
    # Follower counts of the parent's and root's authors, when the producer sends only
    # the counts (Grox's reply filters read them); else taken from the authors above.
    parent_author_followers: Int64 | None = None
    root_author_followers: Int64 | None = None
    recent_posts: tuple[Post, ...] = ()  # the author's latest posts, newest first
    extra: dict[str, Any] = {}

    @property
    def parent_followers(self) -> int | None:
        if self.parent_author_followers is not None:
            return self.parent_author_followers
        return self.parent_author.follower_count if self.parent_author else None

    @property
    def root_followers(self) -> int | None:
        if self.root_author_followers is not None:
            return self.root_author_followers
        return self.root_author.follower_count if self.root_author else None


#: The post of a user-only payload (Grox has payloads about an account, not a post):
#: it has no id, and plans that need a post skip it (reason `no_post`).
NO_POST = Post(id="")


class Envelope(msgspec.Struct, frozen=True, kw_only=True):
    """What a stream message holds: a post and, optionally, its author and context; or
    only a user (then `post` is NO_POST).

    `grebe.codec.decode_envelope` also accepts a bare Post object."""

    post: Post = NO_POST
    user: User | None = None
    context: UserContext | None = None


class TaskPayload(msgspec.Struct, frozen=True, kw_only=True):
    """One unit of work: a post plus the eligibilities of the stream it came from."""

    payload_id: str
    post: Post
    user: User | None = None
    context: UserContext = UserContext()
    eligibilities: frozenset[str] = frozenset()
    attempt: int = 1
    deadline: float | None = None  # epoch seconds; past it, plans skip
    source: str = ""
    # The stream's mode (grebe.selection.Mode: realtime, recovery, backfill, deluxe,
    # test, delayed): set by the dispatcher from the stream; plans (PTOS) read it.
    mode: str = "realtime"
    enqueued_at: float = msgspec.field(default_factory=time.time)

    @property
    def has_post(self) -> bool:
        """False for a user-only payload."""
        return bool(self.post.id)

    def expired(self, now: float | None = None) -> bool:
        return self.deadline is not None and (now or time.time()) > self.deadline


class TaskStatus(enum.StrEnum):
    SUCCESS = "success"
    SKIPPED = "skipped"
    FAILED = "failed"


class TaskResult(msgspec.Struct, kw_only=True):
    """The merged outcome of every plan a payload was eligible for."""

    payload_id: str
    post_id: str
    success: bool
    plans: dict[str, TaskStatus] = {}
    plan_seconds: dict[str, float] = {}  # wall time of each plan, for the per-plan metric
    labels: list[str] = []
    scores: dict[str, float] = {}
    reasons: dict[str, str] = {}
    embedding: list[float] | None = None
    transcript: str | None = None
    error: str | None = None
    # The failure was the system's (store, disk, model server down), not the post's:
    # errors.is_system_fault of a failed task. The dispatcher retries it without
    # counting an attempt and never dead-letters it.
    system_fault: bool = False
    # The post was rejected for good (errors.PostRejectedError): dead-letter it at once
    # with this reason, no retries.
    rejected: str | None = None
    started_at: float = 0.0
    finished_at: float = 0.0


class Annotation(msgspec.Struct, kw_only=True):
    """One producer's verdict on one post. Keyed by (post_id, producer, version), so
    writing it again after a crash rewrites the same row."""

    post_id: str
    producer: str  # the plan (or model) that produced it
    version: str
    labels: list[str] = []
    scores: dict[str, float] = {}
    reasons: dict[str, str] = {}
    embedding: list[float] | None = None
    transcript: str | None = None
    model_versions: dict[str, str] = {}
    # post_fingerprint() of the post it is about; "" when unknown (rows written before
    # fingerprints). A store refuses a different post under an id it already holds.
    content_fingerprint: str = ""
    created_at: float = msgspec.field(default_factory=time.time)
    updated_at: float = msgspec.field(default_factory=time.time)
    # The moderation policy (thresholds, actions) the labels were decided under; None on
    # annotations stored before policies were versioned (they decode unchanged).
    policy_version: str | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.post_id, self.producer, self.version)


class DeadLetter(msgspec.Struct, kw_only=True):
    """A message grebe gave up on, with everything needed to understand and replay it."""

    source: str
    reason: str
    attempts: int
    last_error: str | None
    original: bytes  # the message value exactly as received
    partition: int = 0
    offset: int = -1
    key: bytes | None = None
    dead_at: float = msgspec.field(default_factory=time.time)


def post_fingerprint(post: Post) -> str:
    """What makes a post *this* post: author, text, media and what it replies to,
    quotes or reposts (not its counters, which change). Two different posts under one
    id differ here; a redelivery or a retry of the same post does not."""
    import hashlib

    identity = (
        post.author_id, post.text, [m.url for m in post.media], post.reply_to_post_id,
        post.quote_of_post_id, post.retweet_of_post_id,
    )
    return hashlib.sha256(msgspec.json.encode(identity)).hexdigest()[:32]
