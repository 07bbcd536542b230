"""The HTTP lookup against a real local HTTP server (the platform's post/user API)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

import pytest

from grebe.errors import HydrationUnavailableError
from grebe.hydration.http import HttpLoader
from grebe.hydration.hydrator import Hydrator, Skip
from grebe.types import Post, TaskPayload

POSTS = {
    "p1": {"id": "p1", "author_id": "a", "text": "hello", "reply_to_post_id": "p0",
           "created_at": 2.0},
    "p0": {"id": "p0", "author_id": "b", "text": "parent", "created_at": 1.0},
}
USERS = {"a": {"id": "a", "name": "Ann", "country": "FR"}, "b": {"id": "b", "follower_count": 9}}


class Lookup(BaseHTTPRequestHandler):
    requests: ClassVar[list[str]] = []
    status = 200

    def do_GET(self):
        Lookup.requests.append(self.path)
        url = urlparse(self.path)
        ids = parse_qs(url.query).get("ids", [])
        if url.path == "/v1/posts":
            body = {"posts": [POSTS[i] for i in ids if i in POSTS]}
        elif url.path == "/v1/users":
            body = {"users": [USERS[i] for i in ids if i in USERS]}
        elif url.path.startswith("/v1/users/") and url.path.endswith("/posts"):
            author = url.path.split("/")[3]
            body = {"posts": [p for p in POSTS.values() if p["author_id"] == author]}
        else:
            body = {"nope": True}
        raw = json.dumps(body).encode() if Lookup.status == 200 else b"broken"
        self.send_response(Lookup.status)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


@pytest.fixture
def lookup_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Lookup)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                     daemon=True).start()
    Lookup.requests, Lookup.status = [], 200
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/"
    server.shutdown()
    server.server_close()


async def test_http_lookup_hydrates_an_id_only_message(lookup_url):
    loader = HttpLoader(lookup_url, timeout_s=2)
    await loader.start()
    try:
        hydrated = await Hydrator(loader, recent_posts=3).hydrate(
            TaskPayload(payload_id="x", post=Post(id="p1")))
        assert not isinstance(hydrated, Skip)
        assert hydrated.post.text == "hello" and hydrated.user.country == "FR"
        assert hydrated.context.parent.text == "parent"
        assert hydrated.context.parent_followers == 9
        assert any(r.startswith("/v1/users/a/posts?limit=") for r in Lookup.requests)
        assert await loader.get_posts(["zzz"]) == {}
    finally:
        await loader.stop()


async def test_http_lookup_down_or_broken_is_unavailable(lookup_url):
    loader = HttpLoader(lookup_url, timeout_s=2)
    await loader.start()
    try:
        Lookup.status = 503
        with pytest.raises(HydrationUnavailableError, match="status 503"):
            await loader.get_posts(["p1"])
        Lookup.status = 200
        assert await loader.recent_posts("a/../../x", 3) == []  # quoted: one path segment
    finally:
        await loader.stop()
    wrong = HttpLoader(lookup_url + "elsewhere", timeout_s=2)  # answers another shape
    await wrong.start()
    try:
        with pytest.raises(HydrationUnavailableError, match="unexpected answer"):
            await wrong.get_posts(["p1"])
    finally:
        await wrong.stop()
    closed = HttpLoader("http://127.0.0.1:9/", timeout_s=0.5)  # nothing listens on port 9
    await closed.start()
    try:
        with pytest.raises(HydrationUnavailableError, match="ConnectError"):
            await closed.get_users(["a"])
    finally:
        await closed.stop()


async def test_lookup_down_pauses_and_retries_then_the_post_is_annotated(tmp_path):
    """The lookup is down when the id-only message arrives: a system fault, retried
    without an attempt and never dead-lettered; once the lookup is up, it is annotated."""
    import asyncio
    import socket

    from grebe.app.supervisor import Runtime
    from grebe.brokers.factory import local_log
    from grebe.brokers.local import LocalProducer
    from grebe.config import load_config
    from grebe.stores.sqlite import SqliteStore

    with socket.socket() as probe:  # a port nothing listens on, yet
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = load_config(
        data_dir=tmp_path, engine={"processes": 0}, metrics={"enabled": False},
        streams=[{"name": "requests", "eligibilities": ["basic"]}],
        dispatcher={"backoff_base_s": 0.05, "backoff_max_s": 0.2, "max_attempts": 1},
        hydration={"backend": "http", "http_url": f"http://127.0.0.1:{port}/v1",
                   "http_timeout_s": 1},
    )
    producer = LocalProducer(local_log(config))
    await producer.start()
    await producer.publish_many("posts", [(None, b'{"post": {"id": "p1"}}')])
    await producer.stop()
    runtime = Runtime(config)
    await runtime.start()
    server = None
    try:
        dispatcher = runtime.dispatcher
        assert dispatcher is not None
        for _ in range(400):
            if dispatcher.stats.system_faults >= 2:
                break
            await asyncio.sleep(0.05)
        assert dispatcher.stats.system_faults >= 2 and dispatcher.stats.dead == 0
        Lookup.requests, Lookup.status = [], 200
        server = ThreadingHTTPServer(("127.0.0.1", port), Lookup)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                         daemon=True).start()
        await asyncio.wait_for(runtime.wait_caught_up(), timeout=60)
        assert dispatcher.stats.dead == 0 and dispatcher.stats.done == 1
    finally:
        await runtime.stop()
        if server is not None:
            server.shutdown()
            server.server_close()
    store = SqliteStore(config.sqlite_path)
    await store.start()
    try:
        (annotation,) = await store.get("p1")
        assert annotation.producer == "basic"
    finally:
        await store.stop()
