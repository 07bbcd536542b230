"""Schema evolution: what an earlier grebe wrote still decodes, new fields take defaults.

The recorded bytes in tests/data/schema_v1 were written by the code before the richer
data model (issue 12 item 2); a field added to types.py without a default fails here.
"""

import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grebe import codec
from grebe.errors import DecodeError
from grebe.types import Annotation, Card, Envelope, Post, TaskPayload, User, UserContext

OLD = Path(__file__).parent / "data" / "schema_v1"


def test_old_envelope_and_bare_post_decode_with_defaults():
    envelope = codec.decode_envelope((OLD / "envelope.json").read_bytes())
    post = envelope.post
    assert (post.id, post.author_id, post.reply_to_post_id, post.like_count) == (
        "p1", "a1", "p0", 5)
    assert post.quoted_post is None and post.urls == () and post.cards == ()
    assert post.quote_count == 0 and post.bookmark_count == 0 and post.safety_labels == ()
    assert envelope.user is not None and envelope.user.protected is False
    assert envelope.user.risk_signals == {} and envelope.user.country is None
    context = envelope.context
    assert context is not None and context.parent is not None and context.root is None
    assert context.parent_followers is None and context.recent_posts == ()
    assert codec.decode_envelope((OLD / "bare_post.json").read_bytes()).post == post


def test_old_payload_and_annotation_decode():
    payload = msgspec.msgpack.decode((OLD / "payload.msgpack").read_bytes(), type=TaskPayload)
    assert payload.post.id == "p1" and payload.eligibilities == {"spam_comment"}
    assert payload.context.parent is not None and payload.context.parent.id == "p0"
    assert msgspec.json.decode((OLD / "payload.json").read_bytes(), type=TaskPayload) == payload
    annotation = msgspec.json.decode((OLD / "annotation.json").read_bytes(), type=Annotation)
    assert isinstance(annotation, Annotation) and annotation.labels == ["spam"]


def test_output_message_with_a_float_list_embedding_still_decodes():
    """The output topic carried embeddings as float lists before compact vectors: a
    consumer's one call still reads such a message, floats exactly as written."""
    raw = (OLD / "annotation_float_embedding.json").read_bytes()
    annotation = codec.decode_annotation(raw)
    assert annotation.embedding == [0.5773502691896258, -0.5773502691896258,
                                    0.5773502691896258, 0.0]
    assert annotation.key == ("p1", "mm_emb_v5", "5") and annotation.reasons == {"parts": "text"}
    assert annotation == msgspec.json.decode(raw, type=Annotation)


def test_output_message_with_a_float16_embedding_still_decodes():
    """The output topic carried float16 vectors (`"dtype": "f16"`, no scale) before int8
    ones: bytes written by that version (main at 77019f8) decode to its float16 values."""
    raw = (OLD / "annotation_f16_embedding.json").read_bytes()
    annotation = codec.decode_annotation(raw)
    assert annotation.embedding == [0.60009765625, -0.7998046875, 0.0, 0.0]
    assert annotation.key == ("p1", "post_embedding_with_summary", "3")
    assert annotation.reasons == {"summary": "post"} and annotation.updated_at == 2.0


def test_new_fields_round_trip():
    quoted = Post(id="q", author_id="b", text="quoted")
    post = Post(
        id="p", author_id="a", quoted_post=quoted, quote_of_post_id="q",
        ancestor_ids=("r", "m"), urls=("https://example.com/x",),
        cards=(Card(url="https://example.com/x", title="T", description="D"),),
        quote_count=2, bookmark_count=3, safety_labels=("sensitive",),
    )
    user = User(id="a", protected=True, name="Ann", bio="hi", country="FR", language="fr",
                risk_signals={"new_account": 1.0})
    context = UserContext(parent_author_followers=10, root_author=User(id="r", follower_count=7))
    raw = codec.encode(Envelope(post=post, user=user, context=context))
    decoded = codec.decode_envelope(raw)
    assert decoded == Envelope(post=post, user=user, context=context)
    assert decoded.context is not None
    assert (decoded.context.parent_followers, decoded.context.root_followers) == (10, 7)
    assert post.root_post_id == "r"


def test_id_only_and_user_only_messages_decode():
    assert codec.decode_envelope(b'{"post": {"id": "123"}}').post.is_stub
    envelope = codec.decode_envelope(b'{"user": {"id": "u1", "protected": true}}')
    assert envelope.user is not None and envelope.user.protected
    assert not TaskPayload(payload_id="x", post=envelope.post).has_post


@pytest.mark.parametrize(("raw", "fragment"), [
    (b'{"context": {}}', "schema: Object missing required field .id."),
    (b'{"post": {"id": ""}}', "a post with an id, or a user"),
    (b'{"post": {"id": "1", "quote_count": 100000000000000000000000}}', "schema"),
    (b'{"post": {"id": "1", "quoted_post": {"id": "2", "quoted_post": {"id": "3",'
     b' "quoted_post": {"id": "4", "quoted_post": {"id": "5"}}}}}}', "quoted posts nested"),
])
def test_bad_new_shapes_are_decode_errors(raw, fragment):
    with pytest.raises(DecodeError, match=fragment):
        codec.decode_envelope(raw)


_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=12,
)
_new_post_fields = st.fixed_dictionaries({"id": st.text(max_size=6)}, optional={
    "quoted_post": _values, "ancestor_ids": _values, "urls": _values, "cards": _values,
    "quote_count": _values, "bookmark_count": _values, "safety_labels": _values,
})
_new_user_fields = st.fixed_dictionaries({"id": st.text(max_size=6)}, optional={
    "protected": _values, "name": _values, "country": _values, "risk_signals": _values,
})
_new_context = st.fixed_dictionaries({}, optional={
    "root": _values, "parent_author": _values, "parent_author_followers": _values,
    "recent_posts": _values,
})


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({}, optional={
    "post": _new_post_fields, "user": _new_user_fields, "context": _new_context}))
def test_hostile_new_fields_decode_or_fail_cleanly_and_what_decodes_is_carriable(message):
    raw = json.dumps(message).encode("utf-8", "surrogatepass")
    try:
        envelope = codec.decode_envelope(raw)
    except DecodeError:
        return
    payload = TaskPayload(payload_id="x", post=envelope.post, user=envelope.user,
                          context=envelope.context or UserContext())
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(payload), type=TaskPayload) == payload
    codec.encode(payload)
