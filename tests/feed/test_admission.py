"""Admission control of feed-serve, against a real uvicorn server and a real httpx
client: beyond `max_concurrent_requests` home requests in flight, a fast 503 with
Retry-After; the admitted requests still finish, and capacity comes back after."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from grebe.feed.admission import Admission
from grebe.feed.home import build_home_pipeline
from grebe.feed.http import build_feed_app
from grebe.feed.settings import FeedSettings
from grebe.feed.viewers import MemoryViewerDirectory, Viewer
from grebe.security.server import uvicorn_config
from grebe.stores.sqlite import SqliteStore
from grebe.thunder.client import LocalThunderClient
from grebe.thunder.events import PostCreate
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import InNetworkQuery, InNetworkResult, ThunderStore

LIMIT = 2


class GatedThunder(LocalThunderClient):
    """Thunder whose answers wait for `gate`: requests stay in flight until the test
    opens it, so "in flight" is observable state, not a timing guess."""

    def __init__(self, store: ThunderStore) -> None:
        super().__init__(store)
        self.gate = asyncio.Event()
        self.waiting = 0

    async def get_in_network_posts(self, query: InNetworkQuery) -> InNetworkResult:
        self.waiting += 1
        try:
            await self.gate.wait()
        finally:
            self.waiting -= 1
        return await super().get_in_network_posts(query)


async def wait_for(condition: object, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_overload_gets_a_fast_503_with_retry_after(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "annotations.db")
    await store.start()
    thunder_store = ThunderStore(ThunderSettings())
    thunder_store.apply(PostCreate(post_id="b1", author_id="bob", created_at=time.time()))
    thunder = GatedThunder(thunder_store)
    settings = FeedSettings(max_concurrent_requests=LIMIT, retry_after_s=3)
    feed = build_home_pipeline(
        settings, store, thunder_store, None, dim=8, thunder=thunder,
        viewers=MemoryViewerDirectory({"alice": Viewer(following=["bob"])}))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(build_feed_app(feed), settings.http,
                                           host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await wait_for(lambda: server.started)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}",
                                     timeout=30) as client:
            admitted = [asyncio.create_task(client.get("/home/alice")) for _ in range(LIMIT)]
            await wait_for(lambda: thunder.waiting == LIMIT)

            started = time.monotonic()
            refused = await client.get("/home/alice")
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "3"
            assert "overloaded" in refused.json()["error"]
            assert time.monotonic() - started < 5  # not queued behind the gate
            health = (await client.get("/healthz")).json()
            assert health["in_flight"] == LIMIT and health["rejected"] == 1

            thunder.gate.set()
            for response in await asyncio.gather(*admitted):
                assert response.status_code == 200
                assert [p["post_id"] for p in response.json()["posts"]] == ["b1"]
            again = await client.get("/home/alice")  # capacity is back
            assert again.status_code == 200
            assert (await client.get("/healthz")).json()["in_flight"] == 0
    finally:
        server.should_exit = True
        await serving
        await feed.aclose()
        await store.stop()


def test_admission_counts_and_refuses_a_bad_limit() -> None:
    admission = Admission(1)
    assert admission.try_enter() and not admission.try_enter()
    admission.leave()
    assert admission.try_enter()
    assert (admission.admitted, admission.rejected, admission.in_flight) == (2, 1, 1)
    with pytest.raises(ValueError):
        Admission(0)
