"""The gRPC service with a real client on 127.0.0.1 (a free port picked by the OS)."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from grebe.thunder.client import GrpcThunderClient, LocalThunderClient, ThunderError
from grebe.thunder.events import PostCreate
from grebe.thunder.proto import thunder_pb2
from grebe.thunder.service import SERVICE_NAME, ThunderServer
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import InNetworkQuery, ThunderStore


def filled_store(settings: ThunderSettings, authors: int, per_author: int) -> ThunderStore:
    store = ThunderStore(settings)
    now = time.time()
    for a in range(authors):
        for i in range(per_author):
            store.apply(PostCreate(post_id=f"p{a}-{i}", author_id=f"u{a}",
                                   created_at=now - 1000 + a * 0.001 + i))
    return store


async def serve(store: ThunderStore, settings: ThunderSettings,
                ready: asyncio.Event | None = None) -> ThunderServer:
    server = ThunderServer(store, settings, ready=ready)
    await server.start()
    return server


@pytest.fixture
async def small() -> AsyncIterator[tuple[ThunderServer, GrpcThunderClient]]:
    settings = ThunderSettings(port=0, max_following=50, serve_originals_per_author=2)
    server = await serve(filled_store(settings, authors=20, per_author=3), settings)
    client = GrpcThunderClient(f"127.0.0.1:{server.port}", timeout_s=5)
    await client.start()
    yield server, client
    await client.stop()
    await server.stop(0)


async def test_returns_what_the_store_returns(small) -> None:  # type: ignore[no-untyped-def]
    server, client = small
    query = InNetworkQuery(user_id="v", following_user_ids=["u1", "u7", "nobody"],
                           exclude_post_ids={"p7-2"}, max_results=10)
    over_grpc = await client.get_in_network_posts(query)
    local = await LocalThunderClient(server.service.store).get_in_network_posts(query)
    assert [p.post_id for p in over_grpc.posts] == ["p1-2", "p7-1", "p1-1", "p7-0"]
    assert over_grpc.posts == local.posts  # the same records, field by field
    assert not over_grpc.partial


async def test_debug_info(small) -> None:  # type: ignore[no-untyped-def]
    _, client = small
    response = await client.call(thunder_pb2.GetInNetworkPostsRequest(
        user_id="v", following_user_ids=["u1", "u2"], debug=True))
    assert response.debug.authors_scanned == 2
    assert response.debug.candidates == 4
    assert response.debug.store_posts == 60


async def test_invalid_arguments(small) -> None:  # type: ignore[no-untyped-def]
    _, client = small
    bad = [
        thunder_pb2.GetInNetworkPostsRequest(user_id="v", following_user_ids=["x"] * 51),
        thunder_pb2.GetInNetworkPostsRequest(user_id="v", max_results=1_000_000),
        thunder_pb2.GetInNetworkPostsRequest(following_user_ids=["u1"]),
    ]
    for request in bad:
        with pytest.raises(ThunderError) as caught:
            await client.call(request)
        assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT


async def test_health_follows_ingest_readiness() -> None:
    settings = ThunderSettings(port=0)
    ready = asyncio.Event()
    server = await serve(ThunderStore(settings), settings, ready=ready)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            check = health_pb2.HealthCheckRequest(service=SERVICE_NAME)
            assert (await stub.Check(check)).status == health_pb2.HealthCheckResponse.NOT_SERVING
            ready.set()
            for _ in range(100):  # the watcher task flips it on the next loop turns
                if (await stub.Check(check)).status == health_pb2.HealthCheckResponse.SERVING:
                    break
                await asyncio.sleep(0.01)
            assert (await stub.Check(check)).status == health_pb2.HealthCheckResponse.SERVING
    finally:
        await server.stop(0)


async def test_time_budget_gives_partial_results_and_counts_a_timeout() -> None:
    settings = ThunderSettings(port=0, request_budget_ms=0.001, scan_chunk=1)
    server = await serve(filled_store(settings, authors=50, per_author=1), settings)
    client = GrpcThunderClient(f"127.0.0.1:{server.port}", timeout_s=5)
    await client.start()
    try:
        response = await client.call(thunder_pb2.GetInNetworkPostsRequest(
            user_id="v", following_user_ids=[f"u{i}" for i in range(50)], debug=True))
        assert response.partial
        assert 1 <= response.debug.authors_scanned < 50
        assert server.metrics.registry.get_sample_value(
            "grebe_thunder_request_timeouts_total") == 1
    finally:
        await client.stop()
        await server.stop(0)


SERVER_PROCESS = """
import asyncio, sys, time
from grebe.thunder.events import PostCreate
from grebe.thunder.service import ThunderServer
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import ThunderStore

AUTHORS = int(sys.argv[2])

async def main():
    settings = ThunderSettings(port=0, max_concurrent_requests=int(sys.argv[1]),
                               scan_chunk=1, request_budget_ms=10_000)
    store = ThunderStore(settings)
    now = time.time()
    for a in range(AUTHORS):
        store.apply(PostCreate(post_id=f"p{a}", author_id=f"u{a}", created_at=now - a))
    server = ThunderServer(store, settings)
    print(await server.start(), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until EOF
    rejected = server.metrics.registry.get_sample_value("grebe_thunder_requests_rejected_total")
    print(int(rejected), server.service.in_flight, flush=True)
    await server.stop(0)

asyncio.run(main())
"""


OVERLOAD_AUTHORS = 3000


async def test_overload_is_shed_fast_while_admitted_calls_keep_latency() -> None:
    """The server runs in its own process, as it would in production, so the 40 callers
    here do not share its event loop."""
    limit = 4
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SERVER_PROCESS, str(limit), str(OVERLOAD_AUTHORS),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdin is not None
    port = int(await asyncio.wait_for(proc.stdout.readline(), 30))
    client = GrpcThunderClient(f"127.0.0.1:{port}", timeout_s=30, compression="none")
    await client.start()
    # Slow answers (the server yields after every one of thousands of authors), so an
    # admitted call costs clearly more than a refusal even on a loaded machine: the
    # time goes to the server's work, not to this process encoding 40 requests.
    request = thunder_pb2.GetInNetworkPostsRequest(
        user_id="v", following_user_ids=[f"u{i}" for i in range(OVERLOAD_AUTHORS)],
        max_results=50)

    async def timed() -> tuple[str, float]:
        started = time.perf_counter()
        try:
            await client.call(request)
            code = "OK"
        except ThunderError as exc:
            code = exc.code.name if exc.code else "?"
        return code, time.perf_counter() - started

    try:
        solo = statistics.median([(await timed())[1] for _ in range(5)])
        results = await asyncio.gather(*(timed() for _ in range(40)))
    finally:
        await client.stop()
        proc.stdin.close()
        rejected_count, in_flight = map(int, (await proc.stdout.readline()).split())
        await proc.wait()
    admitted = [t for code, t in results if code == "OK"]
    rejected = [t for code, t in results if code == "RESOURCE_EXHAUSTED"]
    assert len(admitted) + len(rejected) == 40
    assert len(admitted) >= limit and len(rejected) >= 10
    assert rejected_count == len(rejected) and in_flight == 0
    # Shed calls are answered without doing the work...
    assert statistics.median(rejected) < statistics.median(admitted)
    # ...and admitted calls wait for at most `limit` peers, not for all 40 callers.
    assert max(admitted) < solo * (limit + 1) * 2 + 0.1
