"""Slow and idle connections cannot pin `grebe serve`: raw TCP clients against the real
app under uvicorn as `grebe serve` configures it (grebe.security.server)."""

import asyncio
import contextlib
import socket
import time

import pytest
import uvicorn

from grebe.api.app import build_app
from grebe.security.server import uvicorn_config

HEADER_TIMEOUT_S = 0.5
KEEP_ALIVE_S = 1
BODY_TIMEOUT_S = 0.5
#: Every close must come long before "never" but may be late on a loaded machine.
CLOSE_WITHIN_S = 15.0


@pytest.fixture(params=["h11", "httptools"])
async def served(make_api, request):
    """The API on a real socket with short timeouts, with each HTTP parser; yields its
    port."""
    service, _ = await make_api(api={"http": {
        "header_timeout_s": HEADER_TIMEOUT_S, "keep_alive_s": KEEP_ALIVE_S,
        "body_timeout_s": BODY_TIMEOUT_S, "max_header_bytes": 4096}})
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn_config(build_app(service), service.config.api.http,
                                           http_parser=request.param,
                                           lifespan="off", log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        assert not task.done(), "uvicorn exited during start-up"
        await asyncio.sleep(0.01)
    yield sock.getsockname()[1]
    server.should_exit = True
    with contextlib.suppress(Exception):
        await task
    sock.close()


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """Everything the server sent before closing; fails if it is still open after
    `seconds`."""
    data = b""
    async with asyncio.timeout(seconds):
        while chunk := await reader.read(65536):
            data += chunk
    return data


async def test_idle_connections_that_never_send_a_request_are_closed(served):
    connections = [await asyncio.open_connection("127.0.0.1", served) for _ in range(400)]
    began = time.monotonic()
    try:
        for reader, _ in connections:
            assert await closed_within(reader, CLOSE_WITHIN_S) == b""
    finally:
        for _, writer in connections:
            writer.close()
    assert time.monotonic() - began < CLOSE_WITHIN_S


async def test_a_request_head_trickled_byte_by_byte_is_cut_off(served):
    reader, writer = await asyncio.open_connection("127.0.0.1", served)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")

    async def trickle() -> None:
        with contextlib.suppress(ConnectionError):
            while True:  # a header that never ends, a byte at a time
                writer.write(b"x")
                await writer.drain()
                await asyncio.sleep(HEADER_TIMEOUT_S / 5)

    slowloris = asyncio.create_task(trickle())
    try:
        assert b"200 OK" not in await closed_within(reader, CLOSE_WITHIN_S)
    finally:
        slowloris.cancel()
        writer.close()


async def test_a_kept_alive_connection_is_closed_when_idle(served):
    reader, writer = await asyncio.open_connection("127.0.0.1", served)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    await writer.drain()
    try:
        assert b"200 OK" in await closed_within(reader, CLOSE_WITHIN_S)
    finally:
        writer.close()


async def test_a_body_that_stalls_gets_408_and_the_connection_closes(served):
    reader, writer = await asyncio.open_connection("127.0.0.1", served)
    writer.write(b"POST /v1/posts HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"id\":")
    await writer.drain()
    try:
        answer = await closed_within(reader, CLOSE_WITHIN_S)
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408")
    assert b"body_timeout_s" in answer


async def test_an_oversized_request_head_is_refused(served):
    reader, writer = await asyncio.open_connection("127.0.0.1", served)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
                 + b"a" * 10_000 + b"\r\n\r\n")
    await writer.drain()
    try:
        answer = await closed_within(reader, CLOSE_WITHIN_S)
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 431")

    reader, writer = await asyncio.open_connection("127.0.0.1", served)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
    for _ in range(10):  # a head that arrives in pieces is cut off (h11's own limit,
        # or grebe.security.server's count for httptools)
        writer.write(b"a" * 1000)
        await writer.drain()
    try:
        answer = await closed_within(reader, CLOSE_WITHIN_S)
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 400")
