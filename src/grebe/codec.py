"""Encoding and decoding of stream messages, in one place so every broker agrees.

Every byte sequence a broker can deliver either decodes into an Envelope that every later
step can handle (encode for the engine IPC, write to a store) or raises DecodeError with a
reason fit for a dead letter: no input can raise anything else here, or later (DESIGN.md,
"no input byte sequence can stop a stream").
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

import msgspec
import numpy as np

from grebe import constants as C
from grebe import quantize
from grebe.errors import DecodeError, InferenceError
from grebe.types import NO_POST, Annotation, DeadLetter, Envelope, Post

NEEDS_POST_OR_USER = "a message needs a post with an id, or a user"
T = TypeVar("T")

_encoder = msgspec.json.Encoder()
_envelope_decoder = msgspec.json.Decoder(Envelope)
_post_decoder = msgspec.json.Decoder(Post)
_dead_letter_decoder = msgspec.json.Decoder(DeadLetter)


def encode(obj: Any) -> bytes:
    return _encoder.encode(obj)


def decode_envelope(raw: bytes | None, max_bytes: int = C.MAX_MESSAGE_BYTES) -> Envelope:
    """Decode a stream message: an Envelope `{"post": {...}}` or a bare Post object.

    Limits (size, nesting depth and integer range of the free-form `context.extra`) are
    checked here so an accepted message can never fail later in a batch with other posts.

    The shape is guessed from whether the bytes hold `"post"` (a substring search costs
    ~50 ns; decoding a bare Post as an Envelope first, to see it fail, cost a whole second
    decode per message), and the other shape is tried when the guess does not fit, so
    both shapes decode whatever their content. Raises DecodeError with a reason fit for
    a dead letter: the error of the shape the sender most likely meant."""
    if not isinstance(raw, (bytes, bytearray, memoryview)) or not raw:
        raise DecodeError("empty: the message has no value")
    if len(raw) > max_bytes:
        raise DecodeError(f"too large: {len(raw)} bytes > limit {max_bytes}")
    try:
        envelope = _decode_either_shape(bytes(raw))
    except DecodeError:
        raise
    except RecursionError as exc:
        raise DecodeError("malformed: nested too deep") from exc
    except (UnicodeError, ValueError, TypeError, OverflowError) as exc:
        raise DecodeError(f"malformed: {type(exc).__name__}: {exc}") from exc
    if not envelope.post.id and envelope.user is None:  # a bare Post with an empty id
        raise DecodeError(f"schema: {NEEDS_POST_OR_USER}")
    _check_ids(envelope)
    _check_quote_depth(envelope)
    if envelope.context is not None and envelope.context.extra:
        check_free_form(envelope.context.extra, "context.extra")
    return envelope


def _check_ids(envelope: Envelope) -> None:
    """An id of only whitespace names nothing (every store and topic would key a post by
    it), and a post with content but no id would pass as a user-only message, its
    content dropped unseen: both are refused, with the reason, before anything is kept."""
    post_id = envelope.post.id
    if post_id and not post_id.strip():
        raise DecodeError(f"schema: post.id is empty or only whitespace ({post_id!r})")
    if not post_id and envelope.post != NO_POST:
        raise DecodeError("schema: post.id is empty but the post has content (it needs an id)")
    if envelope.user is not None and not envelope.user.id.strip():
        raise DecodeError(f"schema: user.id is empty or only whitespace ({envelope.user.id!r})")


def _check_quote_depth(envelope: Envelope, limit: int = C.MAX_QUOTE_DEPTH) -> None:
    """A quoted post may quote another, but not without end: a chain deeper than
    `limit` is refused here, not by a recursion limit in the engine IPC encoder."""
    posts = [envelope.post]
    if envelope.context is not None:
        posts += [p for p in (envelope.context.parent, envelope.context.root) if p is not None]
        posts += envelope.context.recent_posts
    for post in posts:
        depth, quoted = 0, post.quoted_post
        while quoted is not None:
            depth += 1
            if depth > limit:
                raise DecodeError(f"schema: quoted posts nested deeper than {limit}")
            quoted = quoted.quoted_post


def _decode_either_shape(raw: bytes) -> Envelope:
    first, second = (_as_envelope, _as_post) if b'"post"' in raw else (_as_post, _as_envelope)
    try:
        return first(raw)
    except msgspec.ValidationError as likely_error:
        try:
            return second(raw)
        except msgspec.DecodeError:
            raise DecodeError(f"schema: {likely_error}") from likely_error
    except msgspec.DecodeError as exc:
        raise DecodeError(f"malformed: {exc}") from exc


def _as_post(raw: bytes) -> Envelope:
    return Envelope(post=_post_decoder.decode(raw))


def _as_envelope(raw: bytes) -> Envelope:
    """An Envelope; one with neither a post nor a user (every field has a default, so
    any JSON object decodes) is not one: the other shape, or the error, is meant."""
    envelope = _envelope_decoder.decode(raw)
    if not envelope.post.id and envelope.user is None:
        raise msgspec.ValidationError(NEEDS_POST_OR_USER)
    return envelope


def check_free_form(
    value: Any, where: str, max_depth: int = C.MAX_FREE_FORM_DEPTH,
    max_items: int = C.MAX_FREE_FORM_ITEMS,
) -> None:
    """Refuse free-form JSON (a producer's `extra`) that later steps cannot carry: nested
    deeper than `max_depth`, more than `max_items` values, or integers outside 64 bits
    (msgpack, SQLite and PostgreSQL all stop there). Iterative, so depth costs no stack."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > max_items:
            raise DecodeError(f"schema: {where} holds more than {max_items} values")
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            if isinstance(item, int) and not -(2**63) <= item < 2**63:
                raise DecodeError(f"schema: {where} holds an integer outside 64 bits")
            continue
        if depth > max_depth:
            raise DecodeError(f"schema: {where} is nested deeper than {max_depth}")
        stack.extend((child, depth + 1) for child in children)


def decode_dead_letter(raw: bytes) -> DeadLetter:
    return _dead_letter_decoder.decode(raw)


def decode_strict(decoder: msgspec.json.Decoder[T], raw: bytes) -> T:
    """`decoder.decode(raw)`, its failures as one DecodeError whose reason says which kind:
    `schema: ...` (valid JSON, wrong shape) or `malformed: ...` (not JSON)."""
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise DecodeError(f"schema: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise DecodeError(f"malformed: {exc}") from exc



class WireVector(msgspec.Struct, kw_only=True):
    """An embedding as the output topic carries it: int8 values and one float32 scale
    (grebe.quantize; bytes are base64 in JSON, as msgspec writes `bytes`), with its
    dimension and dtype recorded so a reader never guesses. 384 dimensions take 512
    characters instead of ~7.7 KB of decimal floats; the cosine to the float32 vector
    stays above 0.9999 (docs/annotations.md). The previous version's float16 vectors
    (`"dtype": "f16"`, no scale) still decode."""

    dtype: str
    dims: int
    scale: float | None = None  # int8 only: value = int8 * scale
    data: bytes


def _wire_annotation_type() -> Any:
    """Annotation's own fields, with `embedding` also accepting a WireVector: built from
    the struct itself, so a field added to Annotation is on the wire with no edit here,
    and a message of the previous version (the embedding as a float list) still decodes."""
    fields = []
    for field in msgspec.structs.fields(Annotation):
        kind = field.type
        if field.name == "embedding":
            kind = list[float] | WireVector | None
        default = (field.default if field.default is not msgspec.NODEFAULT
                   else msgspec.field(default_factory=field.default_factory)
                   if field.default_factory is not msgspec.NODEFAULT else msgspec.NODEFAULT)
        fields.append((field.name, kind) if default is msgspec.NODEFAULT
                      else (field.name, kind, default))
    return msgspec.defstruct("WireAnnotation", fields, kw_only=True)


_WireAnnotation = _wire_annotation_type()
_wire_annotation_decoder = msgspec.json.Decoder(_WireAnnotation)


def pack_vector(vector: list[float]) -> WireVector | None:
    """int8 bytes and scale of `vector`; None when int8 cannot hold it (a value not
    finite): the caller then sends the floats as they are, losing nothing."""
    quantized = quantize.to_i8(vector)
    if quantized is None:
        return None
    scale, data = quantized
    return WireVector(dtype=C.WIRE_VECTOR_DTYPE, dims=len(vector), scale=scale, data=data)


def unpack_vector(wire: WireVector) -> list[float]:
    """The floats of a WireVector, int8 or the previous version's float16; ValueError
    when its bytes do not match its header."""
    if wire.dtype == C.WIRE_VECTOR_DTYPE:
        if wire.scale is None:
            raise ValueError("an int8 vector needs its scale")
        return quantize.from_i8(wire.scale, wire.data, wire.dims)
    if wire.dtype != C.WIRE_VECTOR_F16:
        raise ValueError(f"unknown vector dtype {wire.dtype!r} "
                         f"(known: {C.WIRE_VECTOR_DTYPE}, {C.WIRE_VECTOR_F16})")
    if len(wire.data) != 2 * wire.dims:
        raise ValueError(f"vector of {wire.dims} dims needs {2 * wire.dims} bytes, "
                         f"holds {len(wire.data)}")
    return np.frombuffer(wire.data, dtype="<f2").astype(np.float32).tolist()  # type: ignore[no-any-return]


def require_finite(annotation: Annotation) -> None:
    """InferenceError (the post's failure: retried, then dead-lettered with the reason)
    when a score or an embedding value is NaN or infinite. JSON has no such numbers: the
    output topic would carry null where a reader expects a number, and the store would
    keep a vector int8 cannot scale; a model that produced one failed on this post."""
    bad = sorted(k for k, v in annotation.scores.items() if not math.isfinite(v))
    if bad:
        raise InferenceError(f"{annotation.producer}: non-finite score(s) {', '.join(bad)} "
                             f"for post {annotation.post_id}")
    # int8 packs only finite vectors (float32's range): its pack, which the store and
    # the output topic then reuse, answers for nearly every vector
    if annotation.embedding is not None and quantize.to_i8(annotation.embedding) is None \
            and not np.isfinite(np.asarray(annotation.embedding, dtype=np.float64)).all():
        raise InferenceError(f"{annotation.producer}: non-finite value in the embedding "
                             f"of post {annotation.post_id}")


def encode_annotation(annotation: Annotation) -> bytes:
    """An annotation as the output topic carries it: JSON, the embedding as a WireVector
    (`{"dtype": "i8", "dims": 384, "scale": 0.0012, "data": "<base64>"}`); every other field as
    `encode` writes it. Read it back with `decode_annotation`."""
    packed = None if annotation.embedding is None else pack_vector(annotation.embedding)
    if packed is None:
        return _encoder.encode(annotation)
    fields = msgspec.structs.asdict(annotation)
    fields["embedding"] = packed
    return _encoder.encode(_WireAnnotation(**fields))


def decode_annotation(raw: bytes) -> Annotation:
    """An annotation from the output topic, its embedding as floats, in one call: this
    version's int8 vector, or the float16 vector or float list of earlier ones. Raises DecodeError
    with the reason for anything else (bad JSON, a wrong field, a vector whose bytes do
    not match its dims or dtype)."""
    wire = decode_strict(_wire_annotation_decoder, raw)
    fields = msgspec.structs.asdict(wire)
    if isinstance(wire.embedding, WireVector):
        try:
            fields["embedding"] = unpack_vector(wire.embedding)
        except ValueError as exc:
            raise DecodeError(f"schema: embedding: {exc}") from exc
    return Annotation(**fields)
