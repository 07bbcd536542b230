"""`grebe thunder publish`: events validated (deletes included), published, and read
back by thunder; and the JSON schema in docs matches the events (issue 13)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grebe.cli import app
from grebe.commands.thunder_publish import event_key, validate_event
from grebe.config import load_config
from grebe.errors import DecodeError
from grebe.thunder.events import event_json_schema
from grebe.thunder.runner import replay_store

SCHEMA = Path(__file__).parents[2] / "docs" / "thunder-events.schema.json"


def test_the_documented_schema_is_the_one_the_code_reads() -> None:
    assert json.loads(SCHEMA.read_text()) == json.loads(json.dumps(event_json_schema()))
    kinds = {ref.split("/")[-1] for ref in
             (a["$ref"] for a in event_json_schema()["anyOf"])}  # type: ignore[index]
    assert kinds == {"PostCreate", "PostDelete", "QuotedPostDelete"}


@pytest.mark.parametrize(("line", "reason"), [
    (b'{"type": "post_delete"}', "post_id"),
    (b'{"type": "post_delete", "post_id": ""}', "post_id is empty"),
    (b'{"type": "quoted_delete", "post_id": "q"}', "quoted_post_id"),
    (b'{"type": "post_create", "post_id": "p", "author_id": "a", "created_at": NaN}',
     "malformed"),
    (b'{"type": "post_create", "post_id": "p", "author_id": "a", "created_at": -1}',
     "created_at"),
    (b'{"type": "post_remove", "post_id": "p"}', "schema"),
    (b'{"id": "p", "author_id": "a"}', "schema"),  # a post, not an event
    (b"{not json", "malformed"),
])
def test_bad_events_are_refused_with_the_reason(line: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        validate_event(line)


def test_replies_are_keyed_by_their_conversation() -> None:
    reply = validate_event(b'{"type": "post_create", "post_id": "r", "author_id": "b", '
                           b'"created_at": 1, "in_reply_to_post_id": "root", '
                           b'"conversation_id": "root"}')
    assert event_key(reply) == b"root"
    assert event_key(validate_event(b'{"type": "post_delete", "post_id": "r"}')) == b"r"


def test_publish_cli_validates_deletes_and_thunder_applies_them(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GREBE_DATA_DIR", str(tmp_path / "var"))
    config = tmp_path / "grebe.yaml"
    config.write_text(json.dumps({"thunder": {"topic": "thunder-events"}}))
    now = time.time()
    lines = [
        {"type": "post_create", "post_id": "p1", "author_id": "a", "created_at": now - 5},
        {"type": "post_create", "post_id": "p2", "author_id": "a", "created_at": now - 4},
        {"type": "post_create", "post_id": "q", "author_id": "b", "created_at": now - 3,
         "quote_of_post_id": "p2"},
        {"type": "post_delete", "post_id": "p1"},
        {"type": "quoted_delete", "post_id": "q", "quoted_post_id": "p2"},
        {"type": "post_delete"},
    ]
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    result = CliRunner().invoke(app, ["thunder", "publish", str(events), "-c", str(config)])
    assert result.exit_code == 1, result.output
    assert "published 5 events" in result.output and "line 6" in result.output

    store = asyncio.run(replay_store(load_config(config), timeout_s=30))
    assert set(store.by_id) == {"p2"}
    assert store.is_deleted("p1") and store.is_deleted("q")
