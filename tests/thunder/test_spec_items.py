"""Specification items of thunder (issue 13): minimum video duration, the per-author
scan cap, request statistics metrics, partition lag, the social-graph lookup."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from grebe.brokers.memory import MemorySource
from grebe.thunder.client import GrpcThunderClient
from grebe.thunder.events import PostCreate, encode_event
from grebe.thunder.graph import ViewerFileGraph
from grebe.thunder.ingest import ThunderIngest
from grebe.thunder.metrics import ThunderMetrics
from grebe.thunder.proto import thunder_pb2
from grebe.thunder.service import ThunderServer
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import InNetworkQuery, ThunderStore

NOW = 1_700_000_000.0


def store_of(**settings: object) -> ThunderStore:
    return ThunderStore(ThunderSettings(**settings), clock=lambda: NOW)  # type: ignore[arg-type]


def video_ids(store: ThunderStore, following: list[str]) -> list[str]:
    query = InNetworkQuery(user_id="v", following_user_ids=following, is_video_request=True)
    return [p.post_id for p in store.get_in_network_posts(query).posts]


def test_videos_shorter_than_the_minimum_are_not_video_eligible() -> None:
    store = store_of(min_video_duration_s=3.0)
    store.apply(PostCreate(post_id="clip", author_id="a", created_at=NOW - 3, has_video=True,
                           video_duration_s=1.5))
    store.apply(PostCreate(post_id="film", author_id="a", created_at=NOW - 2, has_video=True,
                           video_duration_s=30.0))
    store.apply(PostCreate(post_id="unknown", author_id="a", created_at=NOW - 1,
                           has_video=True))
    # Retweets follow their source's length.
    store.apply(PostCreate(post_id="rt-clip", author_id="b", created_at=NOW,
                           retweet_of_post_id="clip"))
    store.apply(PostCreate(post_id="rt-film", author_id="b", created_at=NOW - 0.5,
                           retweet_of_post_id="film"))
    assert video_ids(store, ["a", "b"]) == ["rt-film", "unknown", "film"]
    assert store.get("clip").has_video  # type: ignore[union-attr]  # still a video post


def test_the_scan_cap_bounds_how_far_back_an_author_is_read() -> None:
    store = store_of(max_scan_per_author=4, serve_originals_per_author=2)
    for i in range(10):
        store.apply(PostCreate(post_id=f"p{i}", author_id="a", created_at=NOW - 100 + i))
    newest = {"p9", "p8", "p7"}  # excluded: seen already
    for exclude in (newest, newest | {f"x{i}" for i in range(50)}):  # holes, then a scan
        got = store.get_in_network_posts(InNetworkQuery(
            user_id="v", following_user_ids=["a"], exclude_post_ids=exclude))
        # Only p9..p6 are looked at: p6 is the one left, not p5 from further back.
        assert [p.post_id for p in got.posts] == ["p6"]


async def test_request_statistics_and_the_graph_lookup(tmp_path: Path) -> None:
    viewers = tmp_path / "viewers.json"
    viewers.write_text(json.dumps({"vera": {"following": ["a", "b"]}}))
    settings = ThunderSettings(port=0)
    store = ThunderStore(settings)
    now = time.time()
    store.apply(PostCreate(post_id="a1", author_id="a", created_at=now - 600))
    store.apply(PostCreate(post_id="a2", author_id="a", created_at=now - 300))
    store.apply(PostCreate(post_id="b1", author_id="b", created_at=now - 100,
                           in_reply_to_post_id="a2"))
    metrics = ThunderMetrics()
    server = ThunderServer(store, settings, metrics, graph=ViewerFileGraph(viewers))
    await server.start()
    client = GrpcThunderClient(f"127.0.0.1:{server.port}", timeout_s=5)
    await client.start()
    try:
        # No following list: thunder asks the graph for vera's follows.
        response = await client.call(thunder_pb2.GetInNetworkPostsRequest(user_id="vera"))
        assert [p.post_id for p in response.posts] == ["b1", "a2", "a1"]
        unknown = await client.call(thunder_pb2.GetInNetworkPostsRequest(user_id="nobody"))
        assert list(unknown.posts) == []
    finally:
        await client.stop()
        await server.stop(0)
    sample = metrics.registry.get_sample_value
    assert sample("grebe_thunder_graph_lookups_total") == 2
    assert sample("grebe_thunder_answer_time_range_seconds_count") == 1
    assert abs(sample("grebe_thunder_answer_time_range_seconds_sum") - 500) < 1e-3
    assert abs(sample("grebe_thunder_answer_reply_ratio_sum") - 1 / 3) < 1e-9
    assert sample("grebe_thunder_answer_unique_authors_sum") == 2
    assert sample("grebe_thunder_answer_posts_per_author_sum") == 1.5


async def test_partition_lag_is_published() -> None:
    settings = ThunderSettings(poll_batch=2, poll_timeout_s=0.01, lag_check_interval_s=0.01)
    source = MemorySource("thunder-events")
    for i in range(5):
        source.put(encode_event(PostCreate(post_id=f"p{i}", author_id="a",
                                           created_at=time.time())))
    metrics = ThunderMetrics()
    ingest = ThunderIngest(source, ThunderStore(settings), settings, metrics)
    seen: list[float] = []
    original = metrics.lag_messages.set

    def record(value: float) -> None:
        seen.append(value)
        original(value)

    metrics.lag_messages.set = record  # type: ignore[method-assign]
    await ingest.start()
    try:
        await ingest.wait_ready(5)
        for _ in range(200):
            if seen and seen[-1] == 0:
                break
            await asyncio.sleep(0.01)
    finally:
        await ingest.stop()
    assert seen[0] == 3  # after the first batch of 2 of 5
    assert seen[-1] == 0 and metrics.registry.get_sample_value(
        "grebe_thunder_ingest_lag_messages") == 0
