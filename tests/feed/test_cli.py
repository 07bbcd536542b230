"""`grebe feed USER_ID` on a real local log and SQLite store, with the MiniLM embedder."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grebe import codec
from grebe.brokers.local import LocalLog, LocalProducer
from grebe.cli import app
from grebe.stores.sqlite import SqliteStore
from grebe.types import Annotation, Envelope, Post


async def _seed(data_dir: Path) -> None:
    now = time.time()
    posts = [
        Post(id="b1", author_id="bob", text="hi", created_at=now - 50),
        Post(id="b2", author_id="bob", text="nsfw", created_at=now - 40),
        Post(id="c1", author_id="carol", text="other", created_at=now - 30),
    ]
    producer = LocalProducer(LocalLog(data_dir / "log.db"))
    await producer.start()
    await producer.publish_many("posts", [(None, codec.encode(Envelope(post=p))) for p in posts])
    await producer.stop()
    store = SqliteStore(data_dir / "annotations.db")
    await store.start()
    await store.upsert([Annotation(post_id="b2", producer="safety", version="1",
                                   labels=["nsfw"])])
    await store.stop()


@pytest.mark.slow  # loads the MiniLM embedder twice (~2 s each on 2 cores)
def test_feed_command(tmp_path: Path) -> None:
    asyncio.run(_seed(tmp_path))
    config = tmp_path / "grebe.yaml"
    config.write_text(f"data_dir: {tmp_path}\n")
    result = CliRunner().invoke(app, ["feed", "alice", "-c", str(config),
                                      "--following", "bob", "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert [p["post_id"] for p in body["posts"]] == ["b1"]
    assert body["filtered"] == {"safety": 1}
    # Reading the stream for the feed did not consume it.
    again = CliRunner().invoke(app, ["feed", "alice", "-c", str(config), "--following", "bob",
                                     "--json"])
    assert json.loads(again.output)["retrieved"] == 2


def test_feed_command_reports_bad_input(tmp_path: Path) -> None:
    config = tmp_path / "grebe.yaml"
    config.write_text(f"data_dir: {tmp_path}\nfeed: {{max_results: -1}}\n")
    result = CliRunner().invoke(app, ["feed", "alice", "-c", str(config)])
    assert result.exit_code == 2
    assert "feed.max_results" in result.output
