"""The whole loop as a person runs it: posts -> flows -> annotations -> thunder -> feed.

`grebe ingest` appends posts to the local log; `grebe run --exit-when-done` runs the
post-safety and embedding flows on them with the real local models (profanity and
HateSonar classifiers, MiniLM embeddings) into the SQLite annotation store; `grebe feed`
replays the same log into thunder, indexes the flows' embeddings and ranks a home
timeline. Nothing is stubbed: the assertions hold only if the classifiers label the
abusive post, the embedder puts the two sourdough posts near each other, and the feed
uses both.

The viewer, vera, follows fred and gina, has written about sourdough and liked a
sourdough post by hank. fred posts something abusive. olga (not followed) posts about
sourdough; umar and ursa (not followed) post, more recently, about taxes and football.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grebe.flows import embeddings, multimodal, safety
from grebe.stores.sqlite import SqliteStore

pytestmark = pytest.mark.slow

GREBE = str(Path(sys.executable).with_name("grebe"))
VIEWER = "vera"

#: (post id, author, text, age in seconds)
POSTS = [
    ("v1", "vera", "Fed my sourdough starter twice today and it finally doubled. Baking a "
                   "country loaf tomorrow with a long cold proof.", 3600),
    ("v2", "vera", "Any tips for a more open crumb on sourdough bread? My loaves come out "
                   "dense even at high hydration.", 3000),
    ("h1", "hank", "Adding rye and spelt to a sourdough levain makes the bread taste so much "
                   "deeper, highly recommend it.", 2400),
    ("f1", "fred", "Morning hike up the ridge trail, the fog burned off right as we reached "
                   "the summit.", 900),
    ("f2", "fred", "You stupid bitch, shut your whore mouth and get lost.", 600),
    ("g1", "gina", "Our team shipped the new release tonight, thanks everyone for the late "
                   "hours.", 1200),
    ("o1", "olga", "Baked my first sourdough boule with a homemade levain: crackly crust and "
                   "an airy crumb after a long cold ferment.", 1800),
    # Newer than o1, so recency alone would rank them above it.
    ("u1", "umar", "Reminder: quarterly estimated tax payments are due next week, talk to "
                   "your accountant.", 300),
    ("u2", "ursa", "Transfer rumours: the club is close to signing a new striker before the "
                   "season starts.", 240),
]


def _setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    config = tmp_path / "grebe.yaml"
    config.write_text(json.dumps({
        "data_dir": str(tmp_path / "var"),
        # The unified posts stream of src/grebe/data/default.yaml.
        "streams": [{"name": "unified_posts", "topic": "posts", "eligibilities": [
            safety.NAME, embeddings.NAME, multimodal.V5_NAME]}],
        "engine": {"processes": 1, "drain_window_s": 10},
        "metrics": {"enabled": False},
        "plans": {"factory": "grebe.flows.registry:build_bundle"},
        # Fetch every out-of-network post however dissimilar, so the ranking (not the
        # retrieval cut) has to put the sourdough post above the newer unrelated ones.
        "feed": {"min_similarity": -1.0},
    }))
    now = time.time()
    posts = tmp_path / "posts.jsonl"
    posts.write_text("".join(
        json.dumps({"post": {"id": pid, "author_id": author, "text": text, "lang": "en",
                             "created_at": now - age}}) + "\n"
        for pid, author, text, age in POSTS
    ))
    # `offensive` is blocked at the strict safety level (the default level blocks hate,
    # nsfw and spam); HateSonar's hate class needs slurs, which this file avoids.
    viewers = tmp_path / "viewers.json"
    viewers.write_text(json.dumps({VIEWER: {
        "following": ["fred", "gina"], "engaged": ["h1"], "safety_level": "strict",
    }}))
    return config, posts, viewers


def _grebe(*args: str, timeout: float = 120) -> str:
    done = subprocess.run([GREBE, *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"grebe {' '.join(args)} -> {done.returncode}\n" \
        f"{done.stdout}\n{done.stderr}"
    return done.stdout


async def _labels(db: Path, post_id: str) -> dict[str, list[str]]:
    store = SqliteStore(db)
    await store.start()
    try:
        return {a.producer: a.labels for a in await store.get(post_id)}
    finally:
        await store.stop()


def test_flows_to_feed(tmp_path: Path) -> None:
    config, posts, viewers = _setup(tmp_path)
    _grebe("ingest", str(posts), "-c", str(config))
    _grebe("run", "-c", str(config), "--exit-when-done")

    # The flows labelled the abusive post (and only it) on their own.
    db = tmp_path / "var" / "annotations.db"
    abusive = asyncio.run(_labels(db, "f2"))
    assert "offensive" in abusive[safety.NAME], abusive
    assert asyncio.run(_labels(db, "o1"))[safety.NAME] == ["safe"]

    body = json.loads(_grebe("feed", VIEWER, "-c", str(config), "--viewers", str(viewers),
                             "--json"))
    assert "errors" not in body, body["errors"]
    shown = [p["post_id"] for p in body["posts"]]
    by_id = {p["post_id"]: p for p in body["posts"]}

    # (a) the followed author's abusive post is removed, by the safety filter.
    assert "f2" not in shown
    assert {"post_id": "f2", "author_id": "fred", "filter": "safety"} in body["filtered_posts"]
    # Followed authors' other posts come from thunder, in network.
    assert {"f1", "g1"} <= set(shown)
    assert by_id["f1"]["in_network"] and by_id["f1"]["source"] == "thunder"

    # (b) the sourdough post of an unfollowed author is found by similarity ...
    assert "o1" in shown, body
    assert not by_id["o1"]["in_network"] and by_id["o1"]["source"] == "similar_posts"
    # ... and the newer unrelated out-of-network posts, fetched too (no similarity cut),
    # rank below it: similarity outweighs their recency.
    for unrelated in ("u1", "u2"):
        assert unrelated in shown, body
        assert shown.index(unrelated) > shown.index("o1"), body
        assert by_id[unrelated]["similarity"] < by_id["o1"]["similarity"]
    # The viewer's own posts and the post they already liked are not served back.
    assert not {"v1", "v2", "h1"} & set(shown)
