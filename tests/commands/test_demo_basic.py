"""`grebe demo` end to end, checked against the sample itself, not against the summary's
own arithmetic (annotated + skipped + dead == ingested holds by construction, since
`skipped` is computed as the rest)."""

import json
from typing import Any

from grebe.commands.demo import basic_config, run_basic_demo, sample_path
from grebe.commands.dlq import list_dead_letters
from grebe.flows.basic import PRODUCER
from grebe.stores.sqlite import SqliteStore


def test_sample_has_posts_and_some_bad_lines():
    lines = sample_path().read_text().splitlines()
    assert 190 <= len(lines) <= 220


def _classify(lines: list[str]) -> tuple[int, set[str], set[str], list[str]]:
    """(unparseable lines, ids of posts with text, ids of posts without, JSON non-posts)
    by reading the sample directly: a post is an object, bare or under "post", with a
    string id and author_id."""
    broken, with_text, without_text, not_posts = 0, set(), set(), []
    for line in lines:
        try:
            value: Any = json.loads(line)
        except json.JSONDecodeError:
            broken += 1
            continue
        post = value.get("post", value) if isinstance(value, dict) else None
        if not (isinstance(post, dict) and isinstance(post.get("id"), str)
                and isinstance(post.get("author_id"), str)):
            not_posts.append(line)
        elif str(post.get("text") or "").strip():
            with_text.add(post["id"])
        else:
            without_text.add(post["id"])
    return broken, with_text, without_text, not_posts


async def test_demo_runs_the_sample_end_to_end(tmp_path):
    broken, with_text, without_text, not_posts = _classify(
        sample_path().read_text().splitlines()
    )
    assert with_text and without_text and not_posts  # the sample exercises every path
    summary = await run_basic_demo(tmp_path, engine={"processes": 0})
    assert summary.rejected_at_ingest == broken
    store = SqliteStore(tmp_path / "annotations.db")
    await store.start()
    try:
        for post_id in with_text:  # every post with text has its basic annotation
            rows = await store.get(post_id)
            assert [(a.producer, a.post_id) for a in rows] == [(PRODUCER, post_id)], post_id
        for post_id in without_text:  # skipped: no annotation
            assert await store.get(post_id) == [], post_id
        assert await store.count() == len(with_text) == summary.annotated
    finally:
        await store.stop()
    dead = await list_dead_letters(basic_config(tmp_path))
    # Dead letters are exactly the JSON lines that are not posts (decode errors).
    originals = sorted(entry.record.original.decode() for entry in dead if entry.record)
    assert originals == sorted(not_posts)
    assert summary.dead_lettered == len(not_posts)
