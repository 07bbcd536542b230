"""B8 on a real full disk: the annotation store lives on a 1 MB tmpfs that is filled up.
Every store write fails with "database or disk is full"; the pipeline must pause and
retry, dead-letter nothing and commit nothing, then finish every post once space is
freed. Needs root (mount), as the test machines run."""

import asyncio
import json
import subprocess
import time

import pytest

from grebe.app.supervisor import Runtime
from grebe.brokers.factory import local_log
from grebe.brokers.local import LocalProducer
from grebe.config import load_config
from grebe.stores.sqlite import SqliteStore

pytestmark = pytest.mark.integration

POSTS = 40


@pytest.fixture
def tiny_disk(tmp_path):
    mount = tmp_path / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def _fill(directory) -> None:
    """Write zeros until the filesystem says ENOSPC."""
    f = open(directory / "filler", "wb", buffering=0)  # noqa: SIM115  # closed below
    try:
        while True:
            f.write(b"\0" * 4096)
    except OSError:
        pass
    finally:
        f.close()


async def _wait(condition, within_s: float = 60.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():  # dispatcher stats have no event
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_full_disk_pauses_the_pipeline_and_dead_letters_nothing(tmp_path, tiny_disk):
    config = load_config(
        data_dir=tmp_path,
        streams=[{"name": "posts", "eligibilities": ["basic"]}],
        engine={"processes": 0},
        dispatcher={"backoff_base_s": 0.05, "backoff_max_s": 0.5},
        store={"sqlite_path": str(tiny_disk / "annotations.db")},
        output={"broker": "none"},
        metrics={"enabled": False},
    )
    runtime = Runtime(config)
    await runtime.start()  # the store is open; then the disk fills up under it
    dispatcher = runtime.dispatcher
    assert dispatcher is not None
    try:
        _fill(tiny_disk)
        producer = LocalProducer(local_log(config))
        await producer.start()
        await producer.publish_many("posts", [
            (None, json.dumps({"id": f"p{i}", "author_id": "a", "text": f"post {i}"}).encode())
            for i in range(POSTS)
        ])
        await producer.stop()
        await _wait(lambda: dispatcher.stats.system_faults >= 3 * POSTS)
        assert dispatcher.stats.dead == 0 and dispatcher.stats.done == 0
        (tiny_disk / "filler").unlink()  # the operator frees space
        await asyncio.wait_for(runtime.wait_caught_up(), 60)
    finally:
        assert await runtime.stop(5.0)
    assert dispatcher.stats.dead == 0 and dispatcher.stats.done == POSTS

    store = SqliteStore(config.sqlite_path)
    await store.start()
    assert await store.count() == POSTS
    await store.stop()
    log = local_log(config)
    await log.open()
    assert sum((await log.end_offsets("dead-letters")).values()) == 0
    await log.close()
