import base64
import re

import msgspec
import numpy as np
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


def _unit_vector(dims: int, seed: int) -> list[float]:
    vector = np.random.default_rng(seed).normal(size=dims)
    return (vector / np.linalg.norm(vector)).tolist()  # type: ignore[no-any-return]


def test_annotation_embedding_travels_as_int8_and_decodes_to_floats_in_one_call():
    vector = _unit_vector(384, 1)
    ann = Annotation(post_id="1", producer="mm_emb_v5", version="5", labels=["x"],
                     scores={"lang:en": 1.0}, embedding=vector, created_at=1.0, updated_at=2.0)
    raw = codec.encode_annotation(ann)
    wire = msgspec.json.decode(raw)["embedding"]
    assert (wire["dtype"], wire["dims"]) == ("i8", 384)
    assert wire["scale"] == pytest.approx(max(abs(x) for x in vector) / 127, rel=1e-3)
    assert len(base64.b64decode(wire["data"])) == 384
    assert len(raw) < 900 < len(codec.encode(ann))  # ~7.7 KB as decimal floats
    decoded = codec.decode_annotation(raw)
    assert msgspec.structs.replace(decoded, embedding=None) == msgspec.structs.replace(
        ann, embedding=None)
    assert decoded.embedding is not None and len(decoded.embedding) == 384
    assert all(isinstance(x, float) for x in decoded.embedding)
    assert float(np.dot(decoded.embedding, vector)) > 0.9999


def test_annotation_without_embedding_is_plain_json():
    ann = Annotation(post_id="1", producer="spam", version="1", labels=["spam"])
    assert codec.encode_annotation(ann) == codec.encode(ann)
    assert codec.decode_annotation(codec.encode_annotation(ann)) == ann


def test_any_magnitude_is_scaled_and_exact_multiples_of_the_scale_round_trip():
    ann = Annotation(post_id="1", producer="p", version="1", embedding=[1e6, -2.5, 0.0])
    decoded = codec.decode_annotation(codec.encode_annotation(ann)).embedding
    assert decoded is not None and decoded[0] == pytest.approx(1e6, rel=1e-3)
    assert decoded[2] == 0.0 and abs(decoded[1] + 2.5) <= 1e6 / 127 / 2
    zeros = Annotation(post_id="1", producer="p", version="1", embedding=[0.0, 0.0])
    assert codec.decode_annotation(codec.encode_annotation(zeros)).embedding == [0.0, 0.0]
    exact = Annotation(post_id="1", producer="p", version="1", embedding=[1.0, -0.5, 0.25])
    assert msgspec.json.decode(codec.encode_annotation(exact))["embedding"]["dtype"] == "i8"


def test_vectors_equal_to_float16_precision_quantise_to_the_same_bytes():
    """The scale sits on float16's grid, so a vector and the same vector off in its last
    float32 bits (two plans' embeddings of one text-only post) are one vector at rest."""
    vector = np.asarray(_unit_vector(384, 2), dtype=np.float32)
    nudged = (vector * np.float32(1 + 3e-7)).tolist()
    assert codec.pack_vector(vector.tolist()) == codec.pack_vector(nudged)
    tiny = codec.pack_vector([1e-9, -2e-9])  # a scale below float16's normals: float32
    assert tiny is not None and codec.unpack_vector(tiny) == pytest.approx([1e-9, -2e-9],
                                                                           rel=0.01)


def test_a_vector_int8_cannot_scale_is_not_packed():
    assert codec.pack_vector([float("inf"), 1.0]) is None  # sent as the floats it is
    assert codec.pack_vector([float("nan")]) is None


@pytest.mark.parametrize(("embedding", "fragment"), [
    ({"dtype": "f16", "dims": 3, "data": base64.b64encode(b"\x00" * 4).decode()},
     "3 dims needs 6 bytes, holds 4"),
    ({"dtype": "f64", "dims": 1, "data": base64.b64encode(b"\x00" * 8).decode()},
     "unknown vector dtype 'f64'"),
    ({"dtype": "i8", "dims": 3, "scale": 0.1, "data": base64.b64encode(b"\x00").decode()},
     "3 dims needs 3 bytes, holds 1"),
    ({"dtype": "i8", "dims": 1, "data": base64.b64encode(b"\x00").decode()},
     "needs its scale"),
    ({"dtype": "f16", "dims": 1, "data": "not base64!"}, "schema"),
    ({"dims": 1, "data": ""}, "missing required field `dtype`"),
    ("0.1,0.2", "schema"),
])
def test_bad_wire_vectors_are_decode_errors(embedding, fragment):
    raw = msgspec.json.encode({"post_id": "1", "producer": "p", "version": "1",
                               "embedding": embedding})
    with pytest.raises(DecodeError, match=re.escape(fragment)):
        codec.decode_annotation(raw)


def test_malformed_annotation_is_a_decode_error():
    with pytest.raises(DecodeError, match="malformed"):
        codec.decode_annotation(b"{")
