"""A post or user id that is empty or only whitespace names nothing: such a message is
refused with a reason (ingest reports it, the dispatcher dead-letters it), and the good
posts beside it go in. Before, `{"id": "  "}` went in as a post, and a post with text
but an empty id beside a user went in as a user-only message, its text silently dropped."""

from __future__ import annotations

import json
import re

import pytest

from grebe.brokers.factory import local_log
from grebe.brokers.local import LocalProducer
from grebe.codec import decode_envelope
from grebe.commands.ingest import ingest
from grebe.config import load_config
from grebe.errors import DecodeError

BLANK_POST = "post.id is empty or only whitespace"
BLANK_USER = "user.id is empty or only whitespace"
BLANK = [
    ({"id": "   ", "author_id": "u", "text": "hi"}, BLANK_POST),
    ({"id": "\t\n", "text": "hi"}, BLANK_POST),
    ({"post": {"id": " ", "text": "x"}}, BLANK_POST),
    ({"post": {"id": "", "text": "x"}, "user": {"id": "u1"}},
     "post.id is empty but the post has content"),
    ({"post": {"id": "  ", "text": "x"}, "user": {"id": "u1"}}, BLANK_POST),
    ({"user": {"id": ""}}, BLANK_USER),
    ({"user": {"id": "  "}}, BLANK_USER),
    ({"post": {"id": "p1", "text": "x"}, "user": {"id": " "}}, BLANK_USER),
]


@pytest.mark.parametrize(("message", "reason"), BLANK)
def test_a_blank_id_is_refused_with_the_reason(message: dict, reason: str) -> None:
    with pytest.raises(DecodeError, match=f"^schema: {re.escape(reason)}"):
        decode_envelope(json.dumps(message).encode())


def test_ids_with_content_and_user_only_messages_still_decode() -> None:
    assert decode_envelope(b'{"id": " p1 ", "text": "x"}').post.id == " p1 "
    user_only = decode_envelope(b'{"user": {"id": "u1"}}')
    assert user_only.user is not None and user_only.post.id == ""
    assert decode_envelope(b'{"post": {"id": ""}, "user": {"id": "u1"}}').user is not None


async def test_ingest_reports_blank_ids_and_keeps_every_good_post(tmp_path) -> None:
    lines = tmp_path / "posts.jsonl"
    good = [{"id": f"g{i}", "author_id": "u", "text": "fine"} for i in range(3)]
    lines.write_text("".join(json.dumps(m) + "\n" for m in
                             [good[0], BLANK[0][0], good[1], BLANK[5][0], good[2]]))
    config = load_config(data_dir=tmp_path)
    producer = LocalProducer(local_log(config))
    await producer.start()
    report = await ingest(lines, producer, "posts")
    await producer.stop()
    assert (report.accepted, report.rejected) == (3, 2)
    assert [n for n, _ in report.errors] == [2, 4]
    assert "post.id is empty or only whitespace" in report.errors[0][1]
    log = local_log(config)
    await log.open()
    records = await log.read("posts", [(p, 0) for p in range(4)], 10)
    await log.close()
    assert sorted(r.key for r in records) == [b"g0", b"g1", b"g2"]
