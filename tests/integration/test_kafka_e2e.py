"""`grebe run` replicas on real Kafka and PostgreSQL, end to end.

Posts are produced to a 6-partition topic; `grebe run` replicas (subprocesses, config
by YAML: broker kafka, store postgres, output kafka) share one consumer group. Checked
on the servers themselves: one annotation row per post in PostgreSQL, and every post on
the output topic (exactly once when nobody crashes).

The kill -9 test runs `recording_plan` (the basic plan plus a processing log, every 25th
post held for half a second) and checks at-least-once by what it means: posts below a
committed offset have finished processing, a replica is killed only while one of its
held posts is unfinished, committed posts are never processed again, and a post is
processed more than once only if a kill caught it started and uncommitted.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from grebe.brokers.kafka import KafkaProducer, create_topic, delete_topic
from grebe.config import KafkaConfig
from recording_plan import (
    DONE,
    assert_reprocessing_explained_by_kills,
    held_in_flight,
    read_log,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GREBE = str(Path(sys.executable).with_name("grebe"))
PARTITIONS = 6


@dataclass
class Setup:
    bootstrap: str
    dsn: str
    topic: str
    output: str
    group: str
    table: str
    tmp: Path

    def config(self, *, max_qps: float | None = None, shared_limits: bool = False,
               plans: dict[str, object] | None = None) -> Path:
        stream: dict[str, object] = {
            "name": f"posts-{self.group}", "broker": "kafka", "topic": self.topic,
            "group": self.group, "eligibilities": ["basic"],
        }
        if max_qps:
            stream["max_qps"] = max_qps
        path = self.tmp / f"grebe-{max_qps}.yaml"
        path.write_text(json.dumps({
            "data_dir": str(self.tmp / "var"),
            "streams": [stream],
            "kafka": {"bootstrap_servers": self.bootstrap, "session_timeout_ms": 6000,
                      "revoke_grace_s": 3.0},
            "store": {"backend": "postgres", "postgres_dsn": self.dsn,
                      "postgres_table": self.table},
            "output": {"broker": "kafka", "topic": self.output},
            "engine": {"processes": 0, "drain_window_s": 5},
            "dispatcher": {"max_in_flight": 512, "poll_batch": 128},
            "metrics": {"enabled": False},
            "rate_limits": {"storage": "redis" if shared_limits else "memory"},
            **({"plans": plans} if plans else {}),
        }))
        return path


@pytest.fixture
async def setup(kafka_bootstrap: str, postgres_dsn: str, tmp_path: Path) -> AsyncIterator[Setup]:
    tag = uuid.uuid4().hex[:8]
    s = Setup(kafka_bootstrap, postgres_dsn, f"e2e-in-{tag}", f"e2e-out-{tag}", f"e2e-{tag}",
              f"e2e_{tag}", tmp_path)
    await create_topic(kafka_bootstrap, s.topic, PARTITIONS)
    await create_topic(kafka_bootstrap, s.output, PARTITIONS)
    yield s
    for topic in (s.topic, s.output):
        await delete_topic(kafka_bootstrap, topic)
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await conn.execute(f"DROP TABLE IF EXISTS {s.table}")
    finally:
        await conn.close()


async def _produce(s: Setup, n: int) -> None:
    producer = KafkaProducer(KafkaConfig(bootstrap_servers=s.bootstrap), linger_ms=20)
    await producer.start()
    try:
        for start in range(0, n, 1000):
            await producer.publish_many(s.topic, [
                (f"p{i}".encode(),
                 json.dumps({"id": f"p{i}", "author_id": f"a{i % 97}",
                             "text": f"Post number {i} http://x.example/{i}"}).encode())
                for i in range(start, min(n, start + 1000))
            ])
    finally:
        await producer.stop()


def _start(config: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as handle:
        pythonpath = filter(None, [str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH")])
        return subprocess.Popen(
            [GREBE, "run", "-c", str(config)], stdout=handle, stderr=handle,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(pythonpath)},
            start_new_session=True,
        )


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


async def _annotated(s: Setup) -> list[str]:
    conn = await asyncpg.connect(s.dsn)
    try:
        exists = await conn.fetchval("SELECT to_regclass($1)", s.table)
        if exists is None:
            return []
        return [r[0] for r in await conn.fetch(f"SELECT post_id FROM {s.table}")]
    finally:
        await conn.close()


async def _wait_annotated(
    s: Setup, n: int, within_s: float, procs: list[subprocess.Popen[bytes]]
) -> None:
    deadline = time.monotonic() + within_s
    while len(await _annotated(s)) < n:  # rows written by other processes: re-read
        for proc in procs:
            assert proc.poll() is None, f"grebe run exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"only {len(await _annotated(s))}/{n} annotated"
        await asyncio.sleep(0.5)


async def _output_post_ids(s: Setup) -> list[str]:
    return [post for post, _, _ in await _read_topic(s, s.output, "post_id")]


async def _read_topic(s: Setup, topic: str, id_field: str) -> list[tuple[str, int, int]]:
    """(post id, partition, offset) of every record of `topic`."""
    consumer = AIOKafkaConsumer(bootstrap_servers=s.bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(parts)
        ends = await consumer.end_offsets(parts)
        await consumer.seek_to_beginning(*parts)
        found: list[tuple[str, int, int]] = []
        async with asyncio.timeout(60):
            while sum(ends.values()) > len(found):
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    found += [(json.loads(r.value)[id_field], r.partition, r.offset)
                              for r in records]
        return found
    finally:
        await consumer.stop()


async def _committed_post_ids(s: Setup, positions: dict[tuple[int, int], str]) -> set[str]:
    """Post ids below the group's committed offsets, as the broker has them now."""
    admin = AIOKafkaAdminClient(bootstrap_servers=s.bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(s.group)
    finally:
        await admin.close()
    committed = {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == s.topic}
    return {post for (part, offset), post in positions.items()
            if offset < committed.get(part, -1)}


def _logs(tmp: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-3000:] for p in tmp.glob("replica-*.log"))


async def test_two_replicas_annotate_every_post_once(setup: Setup) -> None:
    posts = 20_000
    await _produce(setup, posts)
    config = setup.config()
    procs = [_start(config, setup.tmp / f"replica-{i}.log") for i in range(2)]
    try:
        await _wait_annotated(setup, posts, 150, procs)
    except AssertionError:
        raise AssertionError(_logs(setup.tmp)) from None
    finally:
        for proc in procs:
            _stop(proc)
    assert [p.returncode for p in procs] == [0, 0], _logs(setup.tmp)
    annotated = await _annotated(setup)
    assert len(annotated) == posts and set(annotated) == {f"p{i}" for i in range(posts)}
    output = await _output_post_ids(setup)
    assert len(output) == posts and set(output) == set(annotated)


async def test_a_replica_joining_mid_stream_takes_partitions_without_duplicates(
    setup: Setup,
) -> None:
    posts = 6_000
    await _produce(setup, posts)
    config = setup.config(max_qps=500)  # slow enough that the join lands mid-stream
    first = _start(config, setup.tmp / "replica-0.log")
    procs = [first]
    joined_log = setup.tmp / "replica-1.log"
    try:
        await _wait_annotated(setup, 500, 60, procs)
        procs.append(_start(config, joined_log))
        async with asyncio.timeout(60):  # the new replica's first assignment
            while "assigned partitions" not in (  # noqa: ASYNC110  # another process's log
                joined_log.read_text() if joined_log.exists() else ""
            ):
                await asyncio.sleep(0.2)
        at_join = len(await _annotated(setup))
        await _wait_annotated(setup, posts, 120, procs)
    finally:
        for proc in procs:
            _stop(proc)
    assert 500 <= at_join < posts - 500, f"the join did not land mid-stream ({at_join})"
    assert len(await _annotated(setup)) == posts
    output = await _output_post_ids(setup)
    assert len(set(output)) == posts
    assert len(output) == posts, "a graceful rebalance must not reprocess finished posts"


async def test_kill_9_a_replica_ten_times_loses_nothing(setup: Setup) -> None:
    posts = 20_000
    rounds = 10
    slow_every = 25
    rng = random.Random(int(os.environ.get("GREBE_CHAOS_SEED", "7")))
    await _produce(setup, posts)
    positions = {(part, offset): post
                 for post, part, offset in await _read_topic(setup, setup.topic, "id")}
    log = setup.tmp / "processing.log"
    config = setup.config(max_qps=250, plans={  # per replica: outlasts the ten rounds
        "factory": "recording_plan:build_bundle",
        "recording": {"log": str(log), "slow_every": slow_every, "slow_s": 0.5},
    })
    procs = [_start(config, setup.tmp / f"replica-{i}.log") for i in range(2)]
    kills: list[tuple[int, set[str]]] = []  # per kill: log lines then, posts committed then
    try:
        for round_ in range(rounds):
            await asyncio.sleep(rng.uniform(1.0, 4.0))
            victim = await _replica_holding_a_slow_post(log, procs, slow_every, rng)
            os.killpg(procs[victim].pid, signal.SIGKILL)
            procs[victim].wait(10)
            # Committed offsets first, then the log: a post committed by now has all
            # its lines before `log_end`, so a later start of it is a reprocessing.
            committed = await _committed_post_ids(setup, positions)
            events = read_log(log)
            kills.append((len(events), committed))
            unfinished = sorted(committed - {post for event, post in events if event == DONE})
            assert not unfinished, f"round {round_}: committed unfinished {unfinished[:5]}"
            procs[victim] = _start(config, setup.tmp / f"replica-{victim}.log")
        assert len(await _annotated(setup)) < posts, "the stream ended before the chaos did"
        await _wait_annotated(setup, posts, 170, procs)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_logs(setup.tmp)}") from None
    finally:
        for proc in procs:
            _stop(proc)
    every = {f"p{i}" for i in range(posts)}
    annotated = await _annotated(setup)
    assert set(annotated) == every, "missing posts"
    events = read_log(log)
    assert {post for event, post in events if event == DONE} == every
    assert_reprocessing_explained_by_kills(events, kills)
    output = await _output_post_ids(setup)
    assert set(output) == every  # at least once on the output topic


async def _replica_holding_a_slow_post(
    log: Path, procs: list[subprocess.Popen[bytes]], slow_every: int, rng: random.Random
) -> int:
    """Index of a replica (engines run in-process: the log's pid is the replica's) that
    has a held post started and unfinished right now: a kill then lands mid-flight."""
    pids = [proc.pid for proc in procs]
    async with asyncio.timeout(60):
        while True:
            holders = set(held_in_flight(log, slow_every).values())
            live = [i for i, pid in enumerate(pids) if pid in holders]
            if live:
                return rng.choice(live)
            await asyncio.sleep(0.01)


async def test_replicas_share_one_qps_budget_through_redis(setup: Setup, redis_url: str) -> None:
    qps = 400
    posts = 8_000
    await _produce(setup, posts)
    config = setup.config(max_qps=qps, shared_limits=True)
    procs = [_start(config, setup.tmp / f"replica-{i}.log") for i in range(2)]
    try:
        await _wait_annotated(setup, 1500, 60, procs)  # both up, past the first burst
        start, before = time.monotonic(), len(await _annotated(setup))
        await _wait_annotated(setup, before + 2400, 60, procs)  # six seconds' worth
        rate = (len(await _annotated(setup)) - before) / (time.monotonic() - start)
    finally:
        for proc in procs:
            _stop(proc)
    # Two replicas with private budgets would run at 2 x qps. Loose below: a busy box
    # may process slower than the budget, which is not what this test is about.
    assert qps * 0.25 <= rate <= qps * 1.2, f"{rate:.0f}/s for a shared budget of {qps}/s"
