"""On real posts, the served bytes parse to exactly the message built field by field.

The 4,163 tweets of bench/data/tweets.jsonl go through thunder's JSON ingest path as
posts of the main stream; their threads come from their own text (a tweet that starts
with "@" replies, "RT @" retweets, one with a link carries a video, one with a quotation
mark quotes), and some are deleted. Over gRPC, with the encode cache off, small (so
entries are evicted and re-encoded) and at its default, every answer must be the
`GetInNetworkPostsResponse` the pre-cache path built from `to_proto` for the same
query: same posts, same fields, same order, byte for byte; and the records the client
makes of them are the store's.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import msgspec
import pytest

from grebe.thunder.client import GrpcThunderClient, from_proto
from grebe.thunder.events import PostDelete, decode_event
from grebe.thunder.proto import thunder_pb2
from grebe.thunder.service import ThunderServer
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import InNetworkQuery, ThunderStore
from grebe.thunder.wire import to_proto

TWEETS = Path(__file__).parents[2] / "bench" / "data" / "tweets.jsonl"


def stream() -> list[bytes]:
    """The tweets as messages of the posts stream, with deletes, in stream order."""
    rows = [json.loads(line) for line in TWEETS.read_text(encoding="utf-8").splitlines()]
    out: list[bytes] = []
    for i, row in enumerate(rows):
        text = row["text"]
        post: dict[str, object] = {k: row[k] for k in ("id", "author_id", "text", "created_at")}
        if i >= 20 and text.startswith("RT @"):
            post["retweet_of_post_id"] = rows[i - 7]["id"]
        elif i >= 20 and text.startswith("@"):
            post["reply_to_post_id"] = rows[i - 3 - i % 5]["id"]
        elif i >= 20 and '"' in text:
            post["quote_of_post_id"] = rows[i - 11]["id"]
        if "http" in text:
            post["media"] = [{"kind": "video", "url": f"https://v.example/{row['id']}.mp4",
                              "duration_s": float(i % 9)}]
        out.append(msgspec.json.encode(post))
        if i % 97 == 50:
            out.append(msgspec.json.encode(PostDelete(post_id=rows[i - 40]["id"])))
    return out


def queries(store: ThunderStore) -> list[InNetworkQuery]:
    rng = random.Random(13)
    authors = sorted(store.authors)
    pids = sorted(store.by_id)
    out = []
    for q in range(40):
        following = rng.sample(authors, rng.choice([5, 80, 400, len(authors)]))
        out.append(InNetworkQuery(
            user_id=rng.choice(["viewer", following[0]]),
            following_user_ids=following,
            exclude_post_ids=set(rng.sample(pids, rng.choice([0, 0, 30, 300]))),
            max_results=rng.choice([800, 800, 50, 1]),
            is_video_request=q % 5 == 4,
        ))
    return out


@pytest.mark.parametrize("cache_posts", [0, 100, ThunderSettings().encoded_cache_posts])
async def test_served_bytes_are_the_messages_built_field_by_field(cache_posts: int) -> None:
    raw = stream()
    newest = max(json.loads(r).get("created_at", 0.0) for r in raw)
    settings = ThunderSettings(port=0, encoded_cache_posts=cache_posts,
                               request_budget_ms=60_000)
    store = ThunderStore(settings, clock=lambda: newest + 60)
    store.apply_many(e for e in map(decode_event, raw) if e is not None)
    assert len(store) > 4000 and store.tombstones
    kinds = {"reply": 0, "retweet": 0, "quote": 0, "video": 0}
    for p in store.by_id.values():
        kinds["reply"] += p.in_reply_to_post_id is not None
        kinds["retweet"] += p.source_post_id is not None
        kinds["quote"] += p.quote_of_post_id is not None
        kinds["video"] += p.video_eligible
    assert min(kinds.values()) > 50, kinds
    server = ThunderServer(store, settings)
    port = await server.start()
    client = GrpcThunderClient(f"127.0.0.1:{port}", timeout_s=30, compression="none")
    await client.start()
    try:
        served = 0
        for _ in range(2):  # cold, then from the cache
            for query in queries(store):
                response = await client.call(thunder_pb2.GetInNetworkPostsRequest(
                    user_id=query.user_id, following_user_ids=query.following_user_ids,
                    exclude_post_ids=sorted(query.exclude_post_ids),
                    max_results=query.max_results, is_video_request=query.is_video_request))
                result = store.get_in_network_posts(query)
                want = thunder_pb2.GetInNetworkPostsResponse(
                    posts=[to_proto(p) for p in result.posts], partial=result.partial)
                assert response == want
                assert response.SerializeToString() == want.SerializeToString()
                # And the client's records are the store's, field by field.
                assert [from_proto(p) for p in response.posts] == result.posts
                served += len(response.posts)
        assert served > 10_000
    finally:
        await client.stop()
        await server.stop(0)
