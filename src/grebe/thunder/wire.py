"""Encode answers fast: each post's protobuf bytes are built once and reused.

Building 800 `LightPost` messages field by field costs ~1 ms of Python per answer, more
than the store's query itself; popular posts are returned to many viewers, so the
encoded bytes of each record are cached and an answer is the concatenation of its posts'
bytes (a repeated field is just its elements one after another). The service sends
those bytes as they are (its method handler's serializer is the identity), so an answer
is neither parsed nor serialised again on the server (`encode`).

The cache is keyed by the record's identity: a record rebuilt by the store (a late
parent filled its reply context) is re-encoded. It holds at most `size` posts, dropping
the oldest entries first.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

from grebe.thunder.proto import thunder_pb2
from grebe.thunder.store import LightPost

#: Wire tags of `GetInNetworkPostsResponse`: posts (field 1, length-delimited), partial
#: (field 2, varint) and debug (field 3, length-delimited).
_POSTS_TAG = b"\x0a"
_PARTIAL = b"\x10\x01"
_DEBUG_TAG = b"\x1a"
_ENCODED = itemgetter(1)  # of a cache entry (record, encoded field)


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
        #: id(record) -> (record, its encoded field). Keyed by identity: an entry holds
        #: its record, so the id cannot be reused while the entry lives and a hit is
        #: that very record (a record the store rebuilt is a new object, encoded
        #: anew); and an int key does not touch the post id string, which in a large
        #: store is one more cache miss per post (bench/thunder_grpc.py).
        self._cache: dict[int, tuple[LightPost, bytes]] = {}

    def __len__(self) -> int:
        return len(self._cache)

    def field(self, post: LightPost) -> bytes:
        hit = self._cache.get(id(post))
        if hit is not None:
            return hit[1]
        encoded = encode_field(post)
        if self.size:
            cache = self._cache
            cache[id(post)] = (post, encoded)
            if len(cache) > self.size:
                del cache[next(iter(cache))]  # the oldest entry
        return encoded

    def encode(self, posts: Sequence[LightPost], partial: bool,
               debug: thunder_pb2.DebugInfo | None = None) -> bytes:
        """The serialised `GetInNetworkPostsResponse`: the posts' cached fields joined
        (looked up in C when all are cached, the usual case; else one by one, encoding
        the missing), then `partial` and `debug` when set."""
        try:
            parts = list(map(_ENCODED, map(self._cache.__getitem__, map(id, posts))))
        except KeyError:
            parts = list(map(self.field, posts))
        if partial:
            parts.append(_PARTIAL)
        if debug is not None:
            body = debug.SerializeToString()
            parts.append(_DEBUG_TAG + _varint(len(body)) + body)
        return b"".join(parts)

    def response(self, posts: Sequence[LightPost], partial: bool
                 ) -> thunder_pb2.GetInNetworkPostsResponse:
        """`encode`, parsed: the message a client receives."""
        return thunder_pb2.GetInNetworkPostsResponse.FromString(self.encode(posts, partial))
