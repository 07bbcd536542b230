import msgspec
import pytest

from grebe import codec
from grebe.errors import DecodeError
from grebe.types import Annotation, DeadLetter, Envelope, Media, Post, TaskPayload


def test_bare_post_and_envelope_decode_to_the_same_post():
    post = Post(
        id="1", author_id="a", text="hello", media=(Media(kind="image", url="https://x/y.png"),)
    )
    bare = codec.decode_envelope(codec.encode(post))
    wrapped = codec.decode_envelope(codec.encode(Envelope(post=post)))
    assert bare.post == wrapped.post == post


def test_shape_guess_falls_back_to_the_other_shape():
    # A bare Post holding the bytes "post" is first tried as an Envelope...
    post = Post(id="1", author_id="a", text="post", lang="post")
    assert codec.decode_envelope(codec.encode(post)).post == post
    # ...and an Envelope whose key is escaped holds no "post" bytes but is one.
    escaped = b'{"\\u0070ost": {"id": "2", "author_id": "b"}}'
    assert codec.decode_envelope(escaped).post == Post(id="2", author_id="b")


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b"{", "malformed"),
        (b"[]", "schema"),
        (b'{"id": 1, "author_id": "a"}', "Expected `str`"),
        (b'{"post": {"author_id": "x"}}', "missing required field `id` - at `$.post`"),
        (b'{"id": "x", "author_id": "a", "media": [{"kind": "gif", "url": "u"}]}', "kind"),
    ],
)
def test_bad_messages_raise_decode_error_with_a_reason(raw, fragment):
    with pytest.raises(DecodeError) as info:
        codec.decode_envelope(raw)
    assert fragment in str(info.value)


def test_round_trips():
    payload = TaskPayload(
        payload_id="p", post=Post(id="1", author_id="a"), eligibilities=frozenset({"x"})
    )
    assert msgspec.json.decode(codec.encode(payload), type=TaskPayload) == payload
    ann = Annotation(
        post_id="1", producer="spam", version="1", labels=["spam"], scores={"spam": 0.9}
    )
    assert msgspec.json.decode(codec.encode(ann), type=Annotation).key == ("1", "spam", "1")
    dead = DeadLetter(source="s", reason="r", attempts=3, last_error="boom", original=b"\x00raw")
    assert codec.decode_dead_letter(codec.encode(dead)).original == b"\x00raw"


def test_payload_expiry():
    payload = TaskPayload(payload_id="p", post=Post(id="1", author_id="a"), deadline=100.0)
    assert payload.expired(now=100.5)
    assert not payload.expired(now=99.0)
    assert not msgspec.structs.replace(payload, deadline=None).expired(now=1e12)
