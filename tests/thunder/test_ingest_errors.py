"""Ingest through broker errors: NOT_SERVING and stalled while it cannot read, then
SERVING again once caught up (issue 13)."""

from __future__ import annotations

import asyncio
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from grebe.brokers.memory import MemorySource
from grebe.core.source import Message
from grebe.errors import BrokerError
from grebe.thunder.client import GrpcThunderClient, ThunderError
from grebe.thunder.events import PostCreate, encode_event
from grebe.thunder.ingest import ThunderIngest
from grebe.thunder.metrics import ThunderMetrics
from grebe.thunder.service import SERVICE_NAME, ThunderServer
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import InNetworkQuery, ThunderStore

SETTINGS = ThunderSettings(poll_batch=4, poll_timeout_s=0.02, retry_backoff_s=0.01,
                           retry_backoff_max_s=0.05, port=0)


class FlakySource(MemorySource):
    """A MemorySource whose polls fail with BrokerError while `failing` is set, as a
    Kafka consumer's do while the broker is unreachable."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.failing = False
        self.failed_polls = 0

    async def poll(self, max_messages: int, timeout: float) -> list[Message]:  # noqa: ASYNC109
        if self.failing:
            self.failed_polls += 1
            await asyncio.sleep(0)
            raise BrokerError("poll: broker transport failure")
        return await super().poll(max_messages, timeout)


def create(pid: str) -> bytes:
    return encode_event(PostCreate(post_id=pid, author_id="a", created_at=time.time()))


async def until(predicate, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_a_poll_error_mid_stream_is_not_serving_then_recovers() -> None:
    source = FlakySource("thunder-events")
    store = ThunderStore(SETTINGS)
    metrics = ThunderMetrics()
    ingest = ThunderIngest(source, store, SETTINGS, metrics)
    server = ThunderServer(store, SETTINGS, metrics, ready=ingest.ready)
    for i in range(6):
        source.put(create(f"p{i}"))
    await ingest.start()
    await server.start()
    client = GrpcThunderClient(f"127.0.0.1:{server.port}", timeout_s=5)
    await client.start()
    query = InNetworkQuery(user_id="v", following_user_ids=["a"], max_results=100)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            check = health_pb2.HealthCheckRequest(service=SERVICE_NAME)

            async def status() -> int:
                return int((await health.Check(check)).status)

            await ingest.wait_ready(5)
            await until(lambda: metrics.registry.get_sample_value(
                "grebe_thunder_ingest_ready") == 1)
            source.failing = True
            await until(lambda: source.failed_polls >= 3)  # it keeps retrying
            assert not ingest.ready.is_set()
            assert metrics.registry.get_sample_value("grebe_thunder_ingest_ready") == 0
            assert metrics.registry.get_sample_value("grebe_thunder_ingest_errors_total") >= 3
            assert metrics.registry.get_sample_value(
                "grebe_thunder_ingest_stalled_seconds") > 0
            for _ in range(100):
                if await status() == health_pb2.HealthCheckResponse.NOT_SERVING:
                    break
                await asyncio.sleep(0.01)
            assert await status() == health_pb2.HealthCheckResponse.NOT_SERVING
            try:
                await client.get_in_network_posts(query)
                raise AssertionError("served while it could not read the stream")
            except ThunderError as exc:
                assert exc.code == grpc.StatusCode.UNAVAILABLE

            for i in range(6, 15):  # written while ingest could not read
                source.put(create(f"p{i}"))
            source.failing = False
            await ingest.wait_ready(5)
            assert len(store) == 15  # caught up before it called itself ready
            assert metrics.registry.get_sample_value(
                "grebe_thunder_ingest_stalled_seconds") == 0
            for _ in range(100):
                if await status() == health_pb2.HealthCheckResponse.SERVING:
                    break
                await asyncio.sleep(0.01)
            assert await status() == health_pb2.HealthCheckResponse.SERVING
            got = await client.get_in_network_posts(query)
            assert len(got.posts) == SETTINGS.serve_originals_per_author
    finally:
        await client.stop()
        await server.stop(0)
        await ingest.stop()


async def test_no_data_before_catch_up() -> None:
    """With part of the stream loaded, the query is refused, not answered from it."""
    store = ThunderStore(SETTINGS)
    store.apply(PostCreate(post_id="p0", author_id="a", created_at=time.time()))
    ready = asyncio.Event()
    server = ThunderServer(store, SETTINGS, ready=ready)
    await server.start()
    client = GrpcThunderClient(f"127.0.0.1:{server.port}", timeout_s=5)
    await client.start()
    query = InNetworkQuery(user_id="v", following_user_ids=["a"])
    try:
        try:
            await client.get_in_network_posts(query)
            raise AssertionError("served a half-loaded store")
        except ThunderError as exc:
            assert exc.code == grpc.StatusCode.UNAVAILABLE
            assert "not caught up" in str(exc)
        ready.set()
        assert [p.post_id for p in (await client.get_in_network_posts(query)).posts] == ["p0"]
    finally:
        await client.stop()
        await server.stop(0)
