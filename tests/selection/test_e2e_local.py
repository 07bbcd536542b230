"""A post its stream does not select, end to end on the local broker: committed with
its skip reason, counted, never dead-lettered, and no plan runs on it; the post it
selects reaches the plans with the stream's mode. In this process and in an engine
process (selection runs in the engine, after hydration)."""

import json
import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from grebe.app.supervisor import Runtime
from grebe.brokers.factory import local_log
from grebe.brokers.local import LocalProducer
from grebe.config import load_config
from grebe.stores.sqlite import SqliteStore

TESTS_DIR = str(Path(__file__).resolve().parents[2])


@pytest.mark.parametrize("processes", [0, 1])
async def test_a_post_not_selected_is_committed_with_its_reason_not_dead_lettered(
        tmp_path, monkeypatch, processes):
    # engine processes import the test plans factory from the repository root
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (TESTS_DIR, os.environ.get("PYTHONPATH")) if p))
    config = load_config(
        data_dir=tmp_path, engine={"processes": processes},
        metrics={"enabled": True, "port": 0},
        plans={"factory": "tests.selection.mode_plan:build_bundle"},
        streams=[{"name": "replies_only", "topic": "posts", "eligibilities": ["basic"],
                  "selection": {"post_types": ["reply"], "mode": "recovery"}}])
    producer = LocalProducer(local_log(config))
    await producer.start()
    await producer.publish_many("posts", [(None, json.dumps(m).encode()) for m in (
        {"post": {"id": "o1", "author_id": "a", "text": "AN ORIGINAL POST"}},
        {"post": {"id": "r1", "author_id": "a", "text": "A LOUD REPLY",
                  "reply_to_post_id": "o1"}},
    )])
    await producer.stop()
    registry = CollectorRegistry()
    runtime = Runtime(config, registry=registry, serve_metrics=False)
    await runtime.start()
    await runtime.wait_caught_up()
    assert await runtime.stop() is True
    assert runtime.dispatcher is not None and runtime.dispatcher.stats.dead == 0

    assert registry.get_sample_value("grebe_dispatcher_not_selected_total", {
        "source": "replies_only", "reason": "not_selected:post_type"}) == 1.0
    assert registry.get_sample_value(
        "grebe_dispatcher_done_total", {"source": "replies_only"}) == 2.0
    store = SqliteStore(config.sqlite_path)
    await store.start()
    assert await store.get("o1") == []  # no plan ran on the post not selected
    (annotation,) = await store.get("r1")
    assert annotation.producer == "basic"
    assert annotation.reasons["mode"] == "recovery"  # the stream's mode reached the plan
    await store.stop()
    log = local_log(config)
    await log.open()
    assert await log.lag("grebe", "posts") == 0  # both committed
    assert sum((await log.end_offsets("dead-letters")).values()) == 0
    await log.close()
