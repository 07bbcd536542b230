"""The home timeline on a real SQLite annotation store, a real thunder store (and its
gRPC service), and a deterministic embedder double (hashed words)."""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from grebe.config import load_config
from grebe.errors import ConfigError
from grebe.feed.home import HomeFeed, build_home_pipeline
from grebe.feed.http import build_feed_app
from grebe.feed.runner import serve_http
from grebe.feed.settings import FeedSettings
from grebe.feed.viewers import MemoryViewerDirectory, Viewer
from grebe.inference.fakes import HashEmbedder
from grebe.security.keys import KeyStore, new_key
from grebe.stores.sqlite import SqliteStore
from grebe.thunder.client import GrpcThunderClient
from grebe.thunder.events import PostCreate
from grebe.thunder.service import ThunderServer
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import ThunderStore
from grebe.types import Annotation

NOW = time.time()

# post id -> (author, text, labels, age in seconds, retweet of)
POSTS: dict[str, tuple[str, str, list[str], float, str | None]] = {
    "b1": ("bob", "morning coffee and a new jazz record", ["safe"], 600, None),
    "b2": ("bob", "explicit photo set", ["nsfw"], 500, None),
    "b3": ("bob", "", [], 400, "c1"),  # bob retweets carol's post
    "b4": ("bob", "already seen this one", ["safe"], 300, None),
    "e1": ("erin", "jazz news from a muted account", ["safe"], 200, None),
    "c1": ("carol", "jazz saxophone concert tonight live jazz", ["safe"], 700, None),
    "c2": ("carol", "live jazz saxophone solo video", ["safe"], 650, None),
    "d1": ("dave", "football match results and league table", ["safe"], 100, None),
    "x1": ("xavier", "best jazz saxophone albums ever", ["safe"], 5000, None),
}


@dataclass
class World:
    feed: HomeFeed
    thunder_store: ThunderStore
    viewers: MemoryViewerDirectory
    embedder: HashEmbedder


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    store = SqliteStore(tmp_path / "annotations.db")
    await store.start()
    thunder_store = ThunderStore(ThunderSettings())
    viewers = MemoryViewerDirectory({
        "alice": Viewer(user_id="alice", following=["bob", "erin"], muted={"erin"},
                        seen={"b4"}, engaged=["x1"]),
    })
    embedder = HashEmbedder(dim=64)
    feed = build_home_pipeline(FeedSettings(min_similarity=0.3), store, thunder_store, embedder,
                               viewers=viewers)
    for post_id, (author, text, labels, age, retweet_of) in POSTS.items():
        thunder_store.apply(PostCreate(post_id=post_id, author_id=author,
                                       created_at=NOW - age, retweet_of_post_id=retweet_of))
        if text:
            vector = (await embedder.embed([text]))[0].tolist()
            await feed.annotations.upsert([
                Annotation(post_id=post_id, producer="safety", version="1", labels=labels),
                Annotation(post_id=post_id, producer="embedding", version="1",
                           embedding=vector, scores={"quality": 0.5}),
            ])
    await feed.start()
    yield World(feed, thunder_store, viewers, embedder)
    await feed.aclose()
    await store.stop()


def ids(posts) -> list[str]:  # type: ignore[no-untyped-def]
    return [c.post_id for c in posts]


async def test_home_timeline(world: World) -> None:
    result = await world.feed.home("alice")
    selected = {c.post_id: c for c in result.selected}
    filtered = {f.candidate.post_id: f.filter for f in result.filtered}
    assert result.errors == {}
    # The unsafe in-network post is filtered by the safety filter.
    assert filtered["b2"] == "safety" and "b2" not in selected
    # Muted author (followed, but muted).
    assert filtered["e1"] == "muted_author"
    # Seen posts never come back (thunder excludes them already).
    assert "b4" not in ids(result.retrieved)
    # An out-of-network post similar to the viewer's interests appears...
    assert selected["c2"].in_network is False
    assert selected["c2"].similarity is not None and selected["c2"].similarity > 0.3
    # The post the viewer engaged with shaped the interests but is not served again.
    assert "x1" not in ids(result.retrieved)
    # ...and the dissimilar one only as backfill (the page is not full), ranked below.
    d1 = next(c for c in result.retrieved if c.post_id == "d1")
    assert d1.source == "similar_posts_backfill" and d1.score < selected["c2"].score
    # carol's c1 came twice (bob's retweet in network, c1 out of network): kept once.
    assert ("b3" in selected) != ("c1" in selected)
    assert "duplicate" in result.filtered_by()
    assert selected["b1"].in_network and "recency" in selected["b1"].score_parts
    scores = [c.score for c in result.selected]
    assert scores == sorted(scores, reverse=True)


async def test_served_posts_are_remembered_and_not_repeated(world: World) -> None:
    first = await world.feed.home("alice", max_results=2)
    await world.feed.pipeline.aclose()  # the side effect ran
    assert set(ids(first.selected)) <= (await world.viewers.get("alice")).seen
    second = await world.feed.home("alice", max_results=2)
    assert not set(ids(first.selected)) & set(ids(second.selected))


async def test_safety_levels(world: World) -> None:
    relaxed = await world.feed.home("alice", safety_level="off")
    assert "b2" in ids(relaxed.selected)
    with pytest.raises(ConfigError):
        await world.feed.home("alice", safety_level="nonsense")


async def test_new_user_with_stated_interests_gets_similar_posts(world: World) -> None:
    result = await world.feed.home("newbie", interests=["jazz saxophone"])
    assert result.selected and all(not c.in_network for c in result.selected)
    similar = [c for c in result.selected if c.source == "similar_posts"]
    assert {"c1", "c2", "x1"} == set(ids(similar))
    # The most similar first; carol's second post is held back by author diversity.
    assert set(ids(result.selected[:2])) == {"c1", "x1"}
    c2 = next(c for c in result.selected if c.post_id == "c2")
    assert c2.score_parts["author_diversity"] < 1.0
    nothing = await world.feed.home("stranger")
    assert nothing.selected == [] and nothing.errors == {}


async def test_deleted_posts_disappear(world: World) -> None:
    world.thunder_store.delete("c2")
    result = await world.feed.home("alice")
    assert "c2" not in ids(result.retrieved)


async def test_http_endpoint(world: World) -> None:
    with TestClient(build_feed_app(world.feed), base_url="http://127.0.0.1") as client:
        body = client.get("/home/alice", params={"debug": "1", "max_results": "3"}).json()
        assert len(body["posts"]) == 3
        assert body["filtered"]["safety"] == 1
        assert {"labels", "score_parts", "source"} <= set(body["posts"][0])
        assert client.get("/home/alice", params={"max_results": "x"}).status_code == 400
        assert client.get("/home/alice", params={"safety_level": "x"}).status_code == 400
        assert client.get("/healthz").json()["indexed_posts"] == 8


async def test_in_network_over_grpc_matches_in_process(world: World) -> None:
    local = await world.feed.home("alice")
    server = ThunderServer(world.thunder_store, ThunderSettings(port=0))
    port = await server.start()
    try:
        remote_feed = build_home_pipeline(
            FeedSettings(min_similarity=0.3), world.feed.annotations.store, world.thunder_store,
            world.embedder, index=world.feed.index,
            viewers=MemoryViewerDirectory({"alice": Viewer(
                following=["bob", "erin"], muted={"erin"}, seen={"b4"}, engaged=["x1"])}),
            thunder=GrpcThunderClient(f"127.0.0.1:{port}"),
        )
        await remote_feed.start()
        remote = await remote_feed.home("alice")
        await remote_feed.aclose()
    finally:
        await server.stop(0)
    assert ids(remote.selected) == ids(local.selected)
    assert remote.errors == {}


async def test_http_needs_a_feed_key_and_debug_needs_the_debug_scope(world: World) -> None:
    reader, reader_entry = new_key("reader", ("feed",))
    admin, admin_entry = new_key("admin", ("feed", "debug"))
    app = build_feed_app(world.feed, KeyStore([reader_entry, admin_entry]))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        missing = client.get("/home/alice")
        assert missing.status_code == 401 and "Bearer" in missing.headers["www-authenticate"]
        as_reader = {"authorization": f"Bearer {reader}"}
        plain = client.get("/home/alice", headers=as_reader)
        assert plain.status_code == 200 and "labels" not in plain.json()["posts"][0]
        debug = client.get("/home/alice", params={"debug": "1"}, headers=as_reader)
        assert debug.status_code == 403 and "debug" in debug.json()["error"]
        as_admin = {"authorization": f"Bearer {admin}"}
        debug = client.get("/home/alice", params={"debug": "1"}, headers=as_admin)
        assert debug.status_code == 200 and "labels" in debug.json()["posts"][0]
        assert client.get("/healthz").status_code == 200
        rebound = client.get("/home/alice", headers={**as_admin, "host": "rebind.evil.example"})
        assert rebound.status_code == 421


async def test_feed_serve_refuses_other_machines_without_keys(tmp_path: Path) -> None:
    config = load_config(data_dir=tmp_path, feed={"http_host": "0.0.0.0"})
    with pytest.raises(ConfigError, match=r"feed\.http_host"):
        await serve_http(config)


def test_unchecked_media_and_threats_are_blocked_by_the_safety_levels() -> None:
    """Fail closed in serving too: a post whose media could not be checked never reaches
    a strict viewer, and a threat reaches nobody but a viewer who turned safety off."""
    settings = FeedSettings()
    assert {"media_unchecked", "threat", "insult"} <= settings.blocked_labels("strict")
    assert "threat" in settings.blocked_labels("default")
    assert "media_unchecked" not in settings.blocked_labels("off")


async def test_served_signals_add_up_to_the_score(world: World) -> None:
    """Signals are derived for served posts only, after ranking; they must be the ones
    the score was computed from: sum of contributions x diversity = score."""
    result = await world.feed.home("alice")
    assert result.selected
    for post in result.selected:
        why = post.explanation
        total = sum(why["contributions"].values()) * why["author_diversity"]
        assert math.isclose(total, post.score, rel_tol=1e-5, abs_tol=1e-6), post.post_id
        assert why["signals"]["interest"] == round(post.similarity, 6)
