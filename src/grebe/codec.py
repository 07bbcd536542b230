"""Encoding and decoding of stream messages, in one place so every broker agrees."""

from __future__ import annotations

from typing import Any

import msgspec

from grebe.errors import DecodeError
from grebe.types import Annotation, DeadLetter, Envelope, Post, TaskPayload, TaskResult

_encoder = msgspec.json.Encoder()
_envelope_decoder = msgspec.json.Decoder(Envelope)
_post_decoder = msgspec.json.Decoder(Post)
_payload_decoder = msgspec.json.Decoder(TaskPayload)
_annotation_decoder = msgspec.json.Decoder(Annotation)
_dead_letter_decoder = msgspec.json.Decoder(DeadLetter)
_result_decoder = msgspec.json.Decoder(TaskResult)


def encode(obj: Any) -> bytes:
    return _encoder.encode(obj)


def decode_envelope(raw: bytes) -> Envelope:
    """Decode a stream message: an Envelope `{"post": {...}}` or a bare Post object.

    The shape is guessed from whether the bytes hold `"post"` (a substring search costs
    ~50 ns; decoding a bare Post as an Envelope first, to see it fail, cost a whole second
    decode per message), and the other shape is tried when the guess does not fit, so
    both shapes decode whatever their content. Raises DecodeError with a reason fit for
    a dead letter: the error of the shape the sender most likely meant."""
    wrapped = b'"post"' in raw
    try:
        if wrapped:
            return _envelope_decoder.decode(raw)
        return Envelope(post=_post_decoder.decode(raw))
    except msgspec.ValidationError as likely_error:
        try:
            if wrapped:
                return Envelope(post=_post_decoder.decode(raw))
            return _envelope_decoder.decode(raw)
        except msgspec.DecodeError:
            raise DecodeError(f"schema: {likely_error}") from likely_error
    except msgspec.DecodeError as exc:
        raise DecodeError(f"malformed: {exc}") from exc


def decode_payload(raw: bytes) -> TaskPayload:
    return _payload_decoder.decode(raw)


def decode_annotation(raw: bytes) -> Annotation:
    return _annotation_decoder.decode(raw)


def decode_dead_letter(raw: bytes) -> DeadLetter:
    return _dead_letter_decoder.decode(raw)


def decode_result(raw: bytes) -> TaskResult:
    return _result_decoder.decode(raw)
