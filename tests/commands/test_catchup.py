"""The one "run until caught up" the demo and `grebe eval` share: it processes exactly what
was in the topics, reports progress, counts dead letters and leaves nothing running."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from grebe import codec
from grebe.commands.catchup import committed_messages, publish, run_until_caught_up
from grebe.config import load_config
from grebe.stores.sqlite import iter_all
from grebe.types import Envelope, Post


async def test_runs_until_every_message_is_committed_then_stops(tmp_path: Path) -> None:
    config = load_config(
        data_dir=tmp_path, metrics={"enabled": False}, engine={"processes": 0},
        dispatcher={"backoff_base_s": 0.01, "backoff_max_s": 0.05},
        streams=[{"name": "a", "topic": "in.a", "eligibilities": ["basic"]},
                 {"name": "b", "topic": "in.b", "eligibilities": ["basic"]}],
    )
    posts = [Post(id=f"p{i}", author_id="x", text=f"post {i}") for i in range(6)]
    await publish(config, {
        "in.a": [(p.id.encode(), codec.encode(Envelope(post=p))) for p in posts[:4]],
        # a post, and JSON that is not one: the dispatcher dead-letters it
        "in.b": [(b"p4", codec.encode(Envelope(post=posts[4]))),
                 (None, json.dumps({"id": 5}).encode())],
    })
    progress: list[int] = []
    run = await run_until_caught_up(config, on_progress=progress.append, refresh_s=0.01)
    assert run.dead_lettered == 1
    assert run.startup_s > 0 and run.processing_s > 0
    assert progress and progress == sorted(progress) and progress[-1] <= 6
    assert await committed_messages(config) == 6  # everything, including the dead letter
    annotated = {a.post_id for a in iter_all(config.sqlite_path)}
    assert annotated == {f"p{i}" for i in range(5)}
    assert asyncio.all_tasks() == {asyncio.current_task()}  # the runtime is stopped
