"""`grebe serve` as a real process: engines, HTTP on a socket, SIGTERM drains and exits 0."""

import asyncio
import os
import signal
import socket
import sys
import time

import httpx
import pytest
import yaml

from grebe.api.server import bind
from grebe.errors import ConfigError
from grebe.security.keys import new_key
from grebe.stores.sqlite import SqliteStore

START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def wait_ready(client: httpx.AsyncClient, process) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.returncode is None, "grebe serve exited during start-up"
        try:
            if (await client.get("/readyz")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError("grebe serve did not become ready")


@pytest.mark.slow
async def test_serve_runs_pipeline_and_api_then_drains_on_sigterm(tmp_path):
    port = free_port()
    config_file = tmp_path / "grebe.yaml"
    config_file.write_text(yaml.safe_dump({
        "data_dir": str(tmp_path),
        "streams": [{"name": "posts", "eligibilities": ["basic"]}],
        "engine": {"processes": 1},
        "plans": {"factory": "grebe.flows.basic:build_bundle"},
        "api": {"port": port},
    }))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from grebe.cli import main; main()", "serve",
        "--config", str(config_file), stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            await wait_ready(client, process)
            posts = [{"id": f"s{i}", "author_id": "a", "text": f"post number {i}"}
                     for i in range(20)]
            assert (await client.post("/v1/posts", json=posts)).status_code == 202
            deadline = time.monotonic() + 30
            while (status := (await client.get("/v1/status")).json())["dispatcher"]["done"] < 20:
                assert time.monotonic() < deadline, status
                await asyncio.sleep(0.05)
            assert status["engines"]["mode"] == "processes"
            assert status["engines"]["alive"] == 1 and len(status["engines"]["pids"]) == 1
            assert "grebe_dispatcher_done_total" in (await client.get("/metrics")).text
            assert (await client.get("/")).status_code == 200
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, stderr.decode()[-3000:]
    store = SqliteStore(tmp_path / "annotations.db")
    await store.start()
    try:
        assert await store.count() == 20
    finally:
        await store.stop()


def test_a_taken_port_is_a_config_error(config_for):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = config_for(api={"port": port})
        with pytest.raises(ConfigError, match=f"api 127.0.0.1:{port}: cannot listen"):
            bind(config.api.host, config.api.port)


@pytest.mark.slow
async def test_serve_on_all_interfaces_with_a_key_from_the_environment(tmp_path):
    """`grebe serve` on 0.0.0.0 starts when the environment supplies a key, and then asks
    every caller but the probes for it, over a real socket."""
    port = free_port()
    key, entry = new_key("ops")
    config_file = tmp_path / "grebe.yaml"
    config_file.write_text(yaml.safe_dump({
        "data_dir": str(tmp_path),
        "streams": [{"name": "posts", "eligibilities": ["basic"]}],
        "engine": {"processes": 0},
        "plans": {"factory": "grebe.flows.basic:build_bundle"},
        "api": {"host": "0.0.0.0", "port": port},
    }))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from grebe.cli import main; main()", "serve",
        "--config", str(config_file), stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "GREBE_AUTH__KEYS": f"[{entry.model_dump_json()}]"},
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            await wait_ready(client, process)
            post = {"id": "k1", "author_id": "a", "text": "hello"}
            refused = await client.post("/v1/posts", json=post)
            assert refused.status_code == 401 and "www-authenticate" in refused.headers
            accepted = await client.post("/v1/posts", json=post,
                                         headers={"authorization": f"Bearer {key}"})
            assert accepted.status_code == 202
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(process.wait(), 30)
    assert process.returncode == 0
