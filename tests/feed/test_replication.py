"""Served posts shared between feed-serve workers (grebe.feed.replication): a page one
worker serves is seen by the other, with the time it was served there, also when
hundreds come faster than the other reads them; an absent peer or a stray frame
costs a count and a log line, never the request."""

from __future__ import annotations

import asyncio
from pathlib import Path

from grebe.feed.replication import ReplicatedViewers
from grebe.feed.viewers import MemoryViewerDirectory, Viewer


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
