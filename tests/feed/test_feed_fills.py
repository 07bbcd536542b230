"""A feed that keeps filling (issue 13): served posts are not repeated, yet the viewer is
not starved: older in-network and less similar out-of-network posts fill the page, and
seen posts come back once the seen window has passed."""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from grebe.feed.home import HomeFeed, build_home_pipeline
from grebe.feed.viewers import MemoryViewerDirectory, Viewer
from grebe.inference.fakes import HashEmbedder
from grebe.stores.sqlite import SqliteStore
from grebe.thunder.events import PostCreate
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import ThunderStore
from grebe.types import Annotation

NOW = time.time()
TOPICS = {
    "music": "jazz saxophone album concert guitar band song melody",
    "football": "football match goal league striker referee stadium penalty",
    "cooking": "recipe pasta oven garlic sauce bake flour butter",
    "space": "rocket orbit planet telescope astronaut galaxy launch moon",
}


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def text_of(topic: str, rng: random.Random) -> str:
    return " ".join(rng.sample(TOPICS[topic].split(), 4))


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[HomeFeed, Clock]]:
    rng = random.Random(13)
    store = SqliteStore(tmp_path / "annotations.db")
    await store.start()
    thunder = ThunderStore(ThunderSettings())
    clock = Clock()
    viewers = MemoryViewerDirectory(
        {"vera": Viewer(user_id="vera", following=["fred", "gina"], engaged=["m0"])},
        seen_window_s=3600, clock=clock)
    embedder = HashEmbedder(dim=64)
    feed = build_home_pipeline(None, store, thunder, embedder, viewers=viewers)
    posts: list[tuple[str, str, str]] = [("m0", "mike", text_of("music", rng))]
    for i in range(12):  # the two followed authors post a little
        posts.append((f"f{i}", "fred" if i % 2 else "gina", text_of("cooking", rng)))
    for i in range(400):  # and 40 others a lot, on four topics
        topic = list(TOPICS)[i % 4]
        posts.append((f"o{i}", f"author{i % 40}", text_of(topic, rng)))
    vectors = await embedder.embed([t for _, _, t in posts])
    for n, ((pid, author, _), vector) in enumerate(zip(posts, vectors, strict=True)):
        thunder.apply(PostCreate(post_id=pid, author_id=author, created_at=NOW - 60 * n))
        await feed.annotations.upsert([Annotation(
            post_id=pid, producer="embedding", version="1", embedding=vector.tolist())])
    await feed.start()
    yield feed, clock
    await feed.aclose()
    await store.stop()


async def test_the_sixth_request_still_returns_a_full_page(world) -> None:  # type: ignore[no-untyped-def]
    feed, _ = world
    sizes: list[int] = []
    served: list[str] = []
    for _ in range(7):
        result = await feed.home("vera", max_results=50)
        await feed.pipeline.aclose()  # the record-served side effect has run
        sizes.append(len(result.selected))
        served += [c.post_id for c in result.selected]
    assert sizes == [50] * 7
    assert len(served) == len(set(served))  # nothing repeated inside the seen window
    assert "m0" not in served  # the engaged post is never served back
    # Every post of the followed authors was served, the older ones included.
    assert {f"f{i}" for i in range(12)} <= set(served)
    # Backfill ran: less similar out-of-network posts filled the later pages.
    assert result.selected[0].source in {"similar_posts", "similar_posts_backfill"}


async def test_seen_posts_come_back_after_the_seen_window(world) -> None:  # type: ignore[no-untyped-def]
    feed, clock = world
    first = await feed.home("vera", max_results=10)
    await feed.pipeline.aclose()
    again = await feed.home("vera", max_results=10)
    await feed.pipeline.aclose()
    assert not {c.post_id for c in first.selected} & {c.post_id for c in again.selected}
    clock.now += 3601  # the window has passed for both pages
    later = await feed.home("vera", max_results=10)
    assert {c.post_id for c in later.selected} == {c.post_id for c in first.selected}


async def test_seen_posts_merge_without_copying_them_again() -> None:
    """What a viewer saw (served posts, up to `max_seen`, and those given up front) and
    what the caller adds are all seen; the hydrator hands the directory's set on as it
    is when the caller adds nothing (no copy of up to 10,000 ids per request)."""
    from grebe.feed.candidates import HomeQuery
    from grebe.feed.hydrators import ViewerHydrator
    from grebe.feed.viewers import MemoryViewerDirectory, Viewer

    viewers = MemoryViewerDirectory({"v": Viewer(user_id="v"),
                                     "w": Viewer(user_id="w", seen={"f1"})})
    await viewers.record_served("v", ["p1", "p2"])
    await viewers.record_served("w", ["p3"])
    hydrator = ViewerHydrator(viewers)
    assert (await viewers.get("v")).seen == {"p1", "p2"}
    assert (await viewers.get("w")).seen == {"f1", "p3"}
    assert viewers.viewers["w"].seen == {"f1"}  # the directory's own set is left alone
    plain = await hydrator.hydrate(HomeQuery(user_id="v"))
    assert plain["seen"] == {"p1", "p2"}
    added = await hydrator.hydrate(HomeQuery(user_id="w", seen={"q1"}))
    assert added["seen"] == {"f1", "p3", "q1"}
    fresh = Viewer(user_id="x", seen={"f2"})
    viewers.viewers["x"] = fresh
    assert (await hydrator.hydrate(HomeQuery(user_id="x")))["seen"] is fresh.seen


async def test_a_viewers_seen_set_is_built_once_until_their_served_posts_change() -> None:
    """The viewer and interests hydrators both ask the directory for the viewer: the
    second ask gets the set the first built (one copy of up to 10,000 ids a request,
    not two), and a served post, a peer's page, an expired post or a new viewer
    record gives a new set holding what changed."""
    clock = [1000.0]
    viewers = MemoryViewerDirectory({"v": Viewer(user_id="v")}, seen_window_s=60,
                                    clock=lambda: clock[0])
    await viewers.record_served("v", ["p1", "p2"])
    first = (await viewers.get("v")).seen
    assert (await viewers.get("v")).seen is first == {"p1", "p2"}
    await viewers.record_served("v", ["p3"])
    assert (await viewers.get("v")).seen == {"p1", "p2", "p3"}
    assert first == {"p1", "p2"}  # the set handed out before is left as it was
    viewers.served_at("v", ["p4"], clock[0])  # another worker's page
    assert (await viewers.get("v")).seen == {"p1", "p2", "p3", "p4"}
    clock[0] += 61  # all expired...
    await viewers.record_served("v", ["p5"])
    clock[0] += 1
    assert (await viewers.get("v")).seen == {"p5"}
    viewers.viewers["v"] = Viewer(user_id="v", seen={"f1"})  # a new record of the viewer
    assert (await viewers.get("v")).seen == {"f1", "p5"}
    clock[0] += 60  # p5 expires on the next ask
    assert (await viewers.get("v")).seen == {"f1"}
