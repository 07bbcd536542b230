"""A client in another language (Go's grpcurl, built from the Go module proxy and cached
outside git) calls thunder with no copy of the proto: reflection, health and the query,
exactly as docs/serving.md shows (scripts/thunder_client_example.sh)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from grebe.thunder.events import PostCreate
from grebe.thunder.service import ThunderServer
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import ThunderStore

SCRIPT = Path(__file__).parents[2] / "scripts" / "thunder_client_example.sh"
INSTALL_TIMEOUT_S = 900  # the first run builds grpcurl (minutes on a shared machine)


def sections(output: str) -> dict[str, str]:
    parts: dict[str, str] = {}
    name = ""
    for line in output.splitlines():
        if line.startswith("== "):
            name = line[3:].strip()
            parts[name] = ""
        elif name:
            parts[name] += line + "\n"
    return parts


async def test_grpcurl_lists_checks_health_and_queries() -> None:
    settings = ThunderSettings(port=0)
    store = ThunderStore(settings)
    now = time.time()
    store.apply(PostCreate(post_id="a1", author_id="alice", created_at=now - 30))
    store.apply(PostCreate(post_id="b1", author_id="bob", created_at=now - 20, has_video=True))
    store.apply(PostCreate(post_id="c1", author_id="carol", created_at=now - 10))
    server = ThunderServer(store, settings)
    await server.start()
    try:
        proc = await asyncio.create_subprocess_exec(
            "bash", str(SCRIPT), f"127.0.0.1:{server.port}",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), INSTALL_TIMEOUT_S)
    finally:
        await server.stop(0)
    assert proc.returncode == 0, err.decode()
    got = sections(out.decode())
    assert set(got["services"].split()) >= {
        "grebe.thunder.v1.InNetworkPosts", "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    }
    assert json.loads(got["health"]) == {"status": "SERVING"}
    posts = json.loads(got["posts"])
    assert [p["post_id"] for p in posts["posts"]] == ["b1", "a1"]
    assert posts["posts"][0]["has_video"] is True and posts["posts"][0]["author_id"] == "bob"
    assert posts["debug"]["authors_scanned"] == 2
