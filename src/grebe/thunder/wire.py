"""Encode answers fast: each post's protobuf bytes are built once and reused.

Building 800 `LightPost` messages field by field costs ~1 ms of Python per answer, more
than the store's query itself; popular posts are returned to many viewers, so the
encoded bytes of each record are cached and an answer is the concatenation of its posts'
bytes (a repeated field is just its elements one after another). The service sends
those bytes as they are (its method handler's serializer is the identity), so an answer
is neither parsed nor serialised again on the server (`encode`).

The cache is keyed by post id and checked by identity against the record: a record
rebuilt by the store (a late parent filled its reply context) is re-encoded. It holds
at most `size` posts, dropping the oldest entries first.
"""

from __future__ import annotations

from collections.abc import Sequence

from grebe.thunder.proto import thunder_pb2
from grebe.thunder.store import LightPost

#: Wire tags of `GetInNetworkPostsResponse`: posts (field 1, length-delimited), partial
#: (field 2, varint) and debug (field 3, length-delimited).
_POSTS_TAG = b"\x0a"
_PARTIAL = b"\x10\x01"
_DEBUG_TAG = b"\x1a"


def to_proto(post: LightPost) -> thunder_pb2.LightPost:
    return thunder_pb2.LightPost(
        post_id=post.post_id,
        author_id=post.author_id,
        created_at=post.created_at,
        is_reply=post.in_reply_to_post_id is not None,
        is_retweet=post.source_post_id is not None,
        in_reply_to_post_id=post.in_reply_to_post_id,
        in_reply_to_author_id=post.in_reply_to_author_id,
        conversation_id=post.conversation_id,
        source_post_id=post.source_post_id,
        source_author_id=post.source_author_id,
        quote_of_post_id=post.quote_of_post_id,
        has_video=post.has_video,
        conversation_author_id=post.conversation_author_id,
        video_eligible=post.video_eligible,
    )


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_field(post: LightPost) -> bytes:
    """The post as one element of the response's `posts` field: tag, length, message."""
    body = to_proto(post).SerializeToString()
    return _POSTS_TAG + _varint(len(body)) + body


class ResponseEncoder:
    def __init__(self, size: int) -> None:
        self.size = size
        self._cache: dict[str, tuple[LightPost, bytes]] = {}

    def __len__(self) -> int:
        return len(self._cache)

    def field(self, post: LightPost) -> bytes:
        hit = self._cache.get(post.post_id)
        if hit is not None and hit[0] is post:
            return hit[1]
        encoded = encode_field(post)
        if self.size:
            cache = self._cache
            cache.pop(post.post_id, None)
            cache[post.post_id] = (post, encoded)
            if len(cache) > self.size:
                del cache[next(iter(cache))]
        return encoded

    def encode(self, posts: Sequence[LightPost], partial: bool,
               debug: thunder_pb2.DebugInfo | None = None) -> bytes:
        """The serialised `GetInNetworkPostsResponse`: the cached fields joined (looked up
        inline: a call per post was a fifth of the server's time per call), then
        `partial` and `debug` when set."""
        cache, field = self._cache, self.field
        parts: list[bytes] = []
        append = parts.append
        for post in posts:
            hit = cache.get(post.post_id)
            append(hit[1] if hit is not None and hit[0] is post else field(post))
        if partial:
            append(_PARTIAL)
        if debug is not None:
            body = debug.SerializeToString()
            append(_DEBUG_TAG + _varint(len(body)) + body)
        return b"".join(parts)

    def response(self, posts: Sequence[LightPost], partial: bool
                 ) -> thunder_pb2.GetInNetworkPostsResponse:
        """`encode`, parsed: the message a client receives."""
        return thunder_pb2.GetInNetworkPostsResponse.FromString(self.encode(posts, partial))
