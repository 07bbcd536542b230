"""Served posts shared between feed-serve workers (grebe.feed.replication): a page one
worker serves is seen by the other, with the time it was served there, also when
hundreds come faster than the other reads them; a neighbourhood one worker's interest
searches found is kept by the other, which then answers the viewer as the first did
without searching; an absent peer or a stray frame costs a count and a log line, never
the request."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from grebe.feed.candidates import HomeQuery
from grebe.feed.neighbourhood import Adopted
from grebe.feed.replication import ReplicatedViewers
from grebe.feed.settings import FeedSettings
from grebe.feed.sources import SimilarPostsSource
from grebe.feed.viewers import MemoryViewerDirectory, Viewer

from .worlds import random_world


async def _settle(replicas: list[ReplicatedViewers], pages: int) -> None:
    """Run the loop until the replicas have received `pages` pages between them."""
    for _ in range(200):
        if sum(r.received for r in replicas) >= pages:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("pages not received")


async def test_a_page_served_by_one_worker_is_seen_by_the_other(tmp_path: Path) -> None:
    paths = [tmp_path / "w0.sock", tmp_path / "w1.sock"]
    clocks = [lambda: 1000.0, lambda: 1000.5]
    replicas = [ReplicatedViewers(MemoryViewerDirectory(
        {"alice": Viewer(user_id="alice", following=["bob"])}, clock=clocks[i],
        seen_window_s=60), paths[i], paths) for i in range(2)]
    for replica in replicas:
        await replica.start()
    try:
        await replicas[0].record_served("alice", ["p1", "p2"])
        await replicas[1].record_served("alice", ["p3"])
        await replicas[1].record_served("carol", ["p9"])
        await _settle(replicas, 3)
        for replica in replicas:
            assert (await replica.get("alice")).seen == {"p1", "p2", "p3"}
            assert (await replica.get("alice")).following == ["bob"]
            assert (await replica.get("carol")).seen == {"p9"}
        # The sender's time, not the receiver's: the seen window ends the same for both.
        assert replicas[1].directory.served["alice"]["p1"] == 1000.0
        assert replicas[0].directory.served["alice"]["p3"] == 1000.5
        assert replicas[0].dropped == replicas[1].dropped == 0
        # A burst the peer cannot read while this loop is busy (a datagram socket
        # queues 10): every page arrives.
        for n in range(300):
            await replicas[0].record_served(f"v{n}", [f"q{n}"])
        await _settle(replicas, 303)
        assert [(await replicas[1].get(f"v{n}")).seen for n in range(300)] == \
            [{f"q{n}"} for n in range(300)]
        assert replicas[0].dropped == 0
    finally:
        for replica in replicas:
            await replica.stop()
    assert not any(p.exists() for p in paths)


async def test_a_neighbourhood_found_by_one_worker_spares_the_other_its_search(
        tmp_path: Path) -> None:
    store, index, vectors, _ = random_world(5, posts=3000, authors=300)
    settings = FeedSettings.model_validate({"out_of_network_max": 40,
                                            "min_similarity": 0.5})
    # Two workers' sources over copies of the same posts (one world here; the index
    # counts the searches of both).
    sources = [SimilarPostsSource(index, store, settings) for _ in range(2)]
    paths = [tmp_path / "w0.sock", tmp_path / "w1.sock"]
    replicas = [ReplicatedViewers(MemoryViewerDirectory(), paths[i], paths)
                for i in range(2)]
    for replica, source in zip(replicas, sources, strict=True):
        replica.share_searches(source)
        await replica.start()
    engaged = vectors[[3, 700, 1400, 2100]]
    mean = engaged.mean(axis=0)

    def query() -> HomeQuery:
        return HomeQuery(user_id="me", following=["u1", "u2"], seen={"p0011"},
                         interest_vector=(mean / np.linalg.norm(mean)).tolist(),
                         interest_vectors=engaged.tolist())

    def page(frame: object) -> list[tuple[str, float | None, str]]:
        return [(c.post_id, c.similarity, c.source) for c in frame]  # type: ignore[attr-defined]

    try:
        first = page(await sources[0].fetch(query()))
        assert len(index.calls) == 1 and len(first) == 40
        for _ in range(200):
            if replicas[1].neighbourhoods:
                break
            await asyncio.sleep(0.005)
        assert replicas[1].neighbourhoods == 1 and replicas[0].neighbourhoods == 0
        # Kept as it came until the other worker serves the viewer (then built once).
        adopted = next(iter(sources[1].neighbourhoods._cache.values()))  # type: ignore[union-attr]
        assert isinstance(adopted, Adopted) and adopted.hood is None
        # The other worker answers the viewer from it, the same posts, with no search.
        assert page(await sources[1].fetch(query())) == first
        assert len(index.calls) == 1
        assert adopted.hood is not None
        kept = [next(iter(sources[0].neighbourhoods._cache.values())),  # type: ignore[union-attr]
                adopted.hood]
        assert page(await sources[1].fetch(query())) == first  # the same built one
        assert adopted.hood is kept[1] and len(index.calls) == 1
        assert kept[1].ids == kept[0].ids and kept[1].filled == kept[0].filled == 40
        assert kept[1].more == kept[0].more
        assert np.array_equal(kept[1].similarity, kept[0].similarity)
        assert replicas[0].dropped == replicas[1].dropped == 0
        # A neighbourhood past the largest frame is not sent (the peer would close the
        # connection on it); pages go on arriving.
        from grebe.feed import replication
        hood = kept[0]
        replication.MAX_FRAME, limit = 1000, replication.MAX_FRAME
        try:
            replicas[0]._found(("me", b"other queries"), hood)
            await asyncio.sleep(0.05)
        finally:
            replication.MAX_FRAME = limit
        assert replicas[0].dropped == 1 and replicas[1].neighbourhoods == 1
        await replicas[0].record_served("me", ["p1"])
        await _settle([replicas[1]], 1)
        assert replicas[1].rejected == 0
    finally:
        for replica in replicas:
            await replica.stop()


async def test_an_absent_peer_or_a_stray_frame_is_counted_not_raised(
        tmp_path: Path) -> None:
    own, gone = tmp_path / "w0.sock", tmp_path / "w1.sock"
    replica = ReplicatedViewers(MemoryViewerDirectory(), own, [own, gone])
    await replica.start()
    try:
        await replica.record_served("alice", ["p1"])  # the peer never listened
        assert replica.dropped == 1
        assert (await replica.get("alice")).seen == {"p1"}  # recorded here all the same
        for junk in (b"\x00\x00\x00\x05hello", b"\xff\xff\xff\xff"):
            _, stray = await asyncio.open_unix_connection(str(own))
            stray.write(junk)
            await stray.drain()
            stray.close()
        for _ in range(200):
            if replica.rejected == 2:
                break
            await asyncio.sleep(0.005)
        assert replica.rejected == 2 and replica.received == 0
    finally:
        await replica.stop()
