"""Fuzz the decode path: no byte sequence a broker can deliver stops a stream.

Three layers, each with hypothesis: `decode_envelope` on random bytes and on hostile JSON
(raises only DecodeError, and whatever it accepts can be carried by every later step);
the dispatcher on a mix of hostile and good messages (each ends acked or dead-lettered
with a reason, and the loop keeps running); and `grebe ingest` on hostile files.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.core.test_dispatcher import Running, ScriptedExecutor, config, post_bytes, stream

from grebe import codec
from grebe.brokers.memory import MemorySource
from grebe.commands.ingest import check
from grebe.core.dispatcher import Dispatcher
from grebe.errors import DecodeError
from grebe.types import TaskPayload, UserContext

# JSON values with the edges that broke grebe before: integers past 64 bits, deep
# nesting, lone surrogates and control characters in strings, huge floats.
_scalars = (
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30)
)
json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=30,
)
post_fields = st.fixed_dictionaries(
    {"id": st.text(max_size=10), "author_id": st.text(max_size=10)},
    optional={
        "text": json_values, "like_count": json_values, "view_count": json_values,
        "created_at": json_values, "media": json_values, "lang": json_values,
        "reply_to_post_id": json_values,
    },
)


def _nested(depth: int) -> bytes:
    return b'{"post":{"id":"1","author_id":"a"},"context":{"extra":{"x":' + (
        b"[" * depth + b"]" * depth
    ) + b"}}}"


def _hostile_envelopes() -> st.SearchStrategy[bytes]:
    envelope = st.fixed_dictionaries(
        {"post": post_fields},
        optional={"user": json_values, "context": st.fixed_dictionaries(
            {}, optional={"extra": json_values, "author": json_values, "parent": json_values}
        )},
    )
    as_json = (envelope | post_fields | json_values).map(
        lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")
    )
    return as_json | st.binary(max_size=300) | st.sampled_from([
        _nested(5_000), _nested(40), b'{"post":{"id":"1","author_id":"a","text":"\xff\xfe"}}',
        b'{"post":{"id":"1","author_id":"a","like_count":100000000000000000000000000}}',
        b'{"post":{"id":"1","author_id":"a","created_at":1e400}}', b"", b"\x00" * 64,
    ])


def _must_be_carriable(envelope: Any) -> None:
    """What every step after decode does with a payload: msgpack for the engine IPC,
    JSON for dead letters and annotations. None of it may fail on an accepted message."""
    payload = TaskPayload(
        payload_id="s:0:0", post=envelope.post, user=envelope.user,
        context=envelope.context or UserContext(), eligibilities=frozenset({"x"}),
    )
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(payload), type=TaskPayload) == payload
    assert msgspec.json.decode(codec.encode(payload), type=TaskPayload) == payload


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_hostile_envelopes())
def test_decode_raises_only_decode_error_and_accepts_only_what_can_be_carried(raw: bytes):
    try:
        envelope = codec.decode_envelope(raw)
    except DecodeError as exc:
        assert str(exc)  # a reason fit for a dead letter
        return
    _must_be_carriable(envelope)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b'{"post":{"id":"1","author_id":"a","text":"\xff\xfe"}}', "malformed"),  # B3
        (_nested(5_000), "nested"),  # B4
        (_nested(40), "nested deeper than"),
        (b'{"post":{"id":"1","author_id":"a","like_count":100000000000000000000000000}}',
         "like_count"),  # B5
        (b'{"post":{"id":"1","author_id":"a"},"context":{"extra":{"n":1e30,"m":'
         b'100000000000000000000000000}}}', "outside 64 bits"),
        (None, "empty"),
        (b"", "empty"),
        (b'{"id":"1","author_id":"a","text":"' + b"x" * (2 << 20) + b'"}', "too large"),
    ],
)
def test_each_reproduction_is_a_decode_error_with_its_reason(raw, fragment):
    with pytest.raises(DecodeError) as info:
        codec.decode_envelope(raw)
    assert fragment in str(info.value)


def test_limits_leave_ordinary_free_form_context_alone():
    extra = {"thread": [{"id": str(i), "scores": [1, 2.5, None]} for i in range(50)],
             "big": 2**63 - 1}
    raw = codec.encode({"post": {"id": "1", "author_id": "a"}, "context": {"extra": extra}})
    assert codec.decode_envelope(raw).context.extra == extra


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_hostile_envelopes(), min_size=1, max_size=12))
def test_the_dispatcher_survives_any_stream(hostile: list[bytes]):
    """Hostile messages between good ones: every message is acked (good) or dead-lettered
    with a reason, offsets commit past all of them, and the good posts all run."""

    async def scenario() -> None:
        source = MemorySource("s")
        messages = [post_bytes(0), *hostile, post_bytes(1)]
        for value in messages:
            source.put(value)
        executor = ScriptedExecutor()
        dispatcher = Dispatcher([stream(source, eligibilities=["x"])], executor, config())
        async with Running(dispatcher):
            async with asyncio.timeout(10):
                await source.wait_acked(len(messages))
        assert dispatcher.stats.done + dispatcher.stats.dead == len(messages)
        assert {p.post.id for _, p in executor.seen} >= {"0", "1"}
        assert len(source.dead_letters) == dispatcher.stats.dead
        for dead in map(codec.decode_dead_letter, source.dead_letters):
            assert dead.reason and dead.last_error
        assert source.committed == {0: len(messages)}

    asyncio.run(scenario())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_hostile_envelopes(), max_size=8), st.booleans())
def test_ingest_check_reports_every_bad_line_and_never_raises(lines: list[bytes], validate):
    numbered = list(enumerate(lines, start=1))
    report = check(numbered, validate=validate)
    assert report.rejected == len(report.errors) <= len(lines)
    for line_no, reason in report.errors:
        assert 1 <= line_no <= len(lines) and reason
