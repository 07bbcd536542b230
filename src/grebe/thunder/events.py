"""The events thunder consumes: a post was created, deleted, or lost the post it quoted.

They travel as JSON with a `type` tag. Thunder also accepts the messages of the main
posts stream (a grebe Envelope or a bare Post) as creates, so it can read the same topic
the content-understanding side reads.
"""

from __future__ import annotations

import msgspec

from grebe import codec
from grebe.errors import DecodeError
from grebe.types import Post


class PostCreate(msgspec.Struct, tag="post_create", tag_field="type", kw_only=True, frozen=True):
    """A new post. Reply and retweet context is optional: thunder fills what is missing
    from the posts it already holds (the parent, the conversation root, the source)."""

    post_id: str
    author_id: str
    created_at: float
    in_reply_to_post_id: str | None = None
    in_reply_to_author_id: str | None = None
    conversation_id: str | None = None
    conversation_author_id: str | None = None
    retweet_of_post_id: str | None = None
    retweet_of_author_id: str | None = None
    quote_of_post_id: str | None = None
    #: The post (for a retweet: the retweeted post) carries a video.
    has_video: bool = False
    #: Length of that video in seconds, when known (shorter than the configured
    #: minimum: not served to video requests).
    video_duration_s: float | None = None
    #: For a retweet: the retweeted post is itself a reply (None: unknown).
    source_is_reply: bool | None = None

    @classmethod
    def from_post(cls, post: Post) -> PostCreate:
        conversation = post.conversation_id
        if conversation is None and post.reply_to_post_id is None:
            conversation = post.id  # an original starts its own conversation
        return cls(
            post_id=post.id,
            author_id=post.author_id,
            created_at=post.created_at,
            in_reply_to_post_id=post.reply_to_post_id,
            conversation_id=conversation,
            retweet_of_post_id=post.retweet_of_post_id,
            quote_of_post_id=post.quote_of_post_id,
            has_video=bool(post.videos),
            video_duration_s=max(
                (m.duration_s for m in post.videos if m.duration_s is not None), default=None),
        )


class PostDelete(msgspec.Struct, tag="post_delete", tag_field="type", kw_only=True, frozen=True):
    post_id: str
    author_id: str | None = None
    deleted_at: float = 0.0


class QuotedPostDelete(
    msgspec.Struct, tag="quoted_delete", tag_field="type", kw_only=True, frozen=True
):
    """`quoted_post_id` was deleted, so the post quoting it (`post_id`) must go too."""

    post_id: str
    quoted_post_id: str
    author_id: str | None = None
    deleted_at: float = 0.0


ThunderEvent = PostCreate | PostDelete | QuotedPostDelete

_event_decoder = msgspec.json.Decoder(ThunderEvent)


def event_json_schema() -> dict[str, object]:
    """The JSON schema of an event line, for producers in any language; the copy in
    docs/thunder-events.schema.json is checked against this by a test."""
    schema = msgspec.json.schema(ThunderEvent)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "grebe thunder event",
        "description": "One line of the thunder topic: a post was created, deleted, or "
        "lost the post it quoted. Times are epoch seconds.",
        **schema,
    }


def encode_event(event: ThunderEvent) -> bytes:
    return codec.encode(event)


def decode_event(raw: bytes) -> ThunderEvent | None:
    """A tagged thunder event, else an Envelope/Post from the posts stream (as a create).
    None: a valid message with no post to store (only ids, or only a user: the engine
    hydrates those, thunder has nothing to add), acked and skipped.

    Raises DecodeError with a reason fit for a dead letter."""
    try:
        return _event_decoder.decode(raw)
    except msgspec.ValidationError as exc:
        event_error: msgspec.ValidationError = exc
    except msgspec.DecodeError as exc:
        raise DecodeError(f"malformed: {exc}") from exc
    try:
        post = codec.decode_envelope(raw).post
    except DecodeError:
        if b'"type"' in raw:  # it meant to be a thunder event: report that shape
            raise DecodeError(f"schema: {event_error}") from event_error
        raise
    return None if post.is_stub else PostCreate.from_post(post)
