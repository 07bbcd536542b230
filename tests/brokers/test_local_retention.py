"""Local log retention: trims by age and size, never past what a consumer group still
needs, keeps dead letters, and bounds the file under a steady stream."""

from __future__ import annotations

import asyncio
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from grebe.brokers.local import LocalLog, LocalSource
from grebe.brokers.local_retention import RetentionPolicy
from grebe.core.source import Outcome

FUTURE = time.time() + 10 * 365 * 24 * 3600  # every message is "old" at this time


async def _log(tmp_path, name="log.db", partitions=2, compress=True) -> LocalLog:
    log = LocalLog(tmp_path / name, partitions=partitions, compress=compress)
    await log.open()
    return log


async def _append(log: LocalLog, topic: str, n: int, key: bytes = b"k", size: int = 10):
    return await log.append(topic, [(key, bytes([65 + i % 26]) * size) for i in range(n)])


async def _offsets(log: LocalLog, topic: str, partitions: int = 2) -> dict[int, list[int]]:
    rows = await log.read(topic, [(p, 0) for p in range(partitions)], 100_000)
    out: dict[int, list[int]] = {p: [] for p in range(partitions)}
    for record in rows:
        out[record.partition].append(record.offset)
    return out


async def test_age_trim_stops_at_the_lowest_uncommitted_offset_of_any_group(tmp_path):
    log = await _log(tmp_path, partitions=1)
    await _append(log, "posts", 100)
    await log.commit("fast", "posts", {0: 80})
    await log.commit("slow", "posts", {0: 30})
    deleted = await log.trim(RetentionPolicy(max_age_s=1), FUTURE)
    assert deleted == {"posts": 30}
    assert (await _offsets(log, "posts", 1))[0] == list(range(30, 100))
    await log.close()


async def test_a_group_that_never_committed_a_partition_protects_all_of_it(tmp_path):
    log = await _log(tmp_path)
    await log.append("posts", [(b"a", b"x")] * 50 + [(b"b", b"y")] * 50)
    parts = await _offsets(log, "posts")
    busy = next(p for p in parts if parts[p])
    other = 1 - busy
    await log.commit("g", "posts", {busy: len(parts[busy])})
    await log.trim(RetentionPolicy(max_age_s=1), FUTURE)
    after = await _offsets(log, "posts")
    assert after[busy] == [] and after[other] == parts[other]
    await log.close()


async def test_unread_topics_age_out_but_dead_letters_are_exempt(tmp_path):
    log = await _log(tmp_path, partitions=1)
    await _append(log, "annotations", 20)
    await _append(log, "grebe.dead_letters", 5)
    policy = RetentionPolicy(max_age_s=3600, exempt=frozenset({"grebe.dead_letters"}))
    assert await log.trim(policy, time.time()) == {}  # nothing is an hour old yet
    assert await log.trim(policy, FUTURE) == {"annotations": 20}
    assert (await _offsets(log, "grebe.dead_letters", 1))[0] == list(range(5))
    # Offsets keep counting after a trim: the next message is 20, not 0.
    assert await _append(log, "annotations", 1) == [(0, 20)]
    await log.close()


async def test_size_limit_keeps_the_newest_bytes_but_not_past_a_group(tmp_path):
    # max_bytes counts bytes at rest: raw values keep this arithmetic plain
    log = await _log(tmp_path, partitions=1, compress=False)
    await _append(log, "posts", 100, key=b"k", size=99)  # 100 bytes a message with its key
    await log.trim(RetentionPolicy(max_bytes=1000), time.time())
    assert (await _offsets(log, "posts", 1))[0] == list(range(90, 100))
    await _append(log, "posts", 100, key=b"k", size=99)
    await log.commit("g", "posts", {0: 150})
    await log.trim(RetentionPolicy(max_bytes=1000), time.time())
    assert (await _offsets(log, "posts", 1))[0] == list(range(150, 200))
    await log.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 2), st.integers(0, 60),
                          st.booleans()), min_size=1, max_size=12))
def test_no_trim_ever_removes_a_message_some_group_has_not_committed(steps):
    """Random appends, commits by three groups and trims by size or age: every message at
    or past the lowest commit of any group that reads the topic is still there."""

    async def scenario(directory) -> None:
        log = await _log(directory, partitions=1)
        await log.topic("t")
        # Three readers from the start (a topic nobody reads ages out; a group created
        # later starts from what is left, as on Kafka).
        committed = {f"g{g}": 0 for g in range(3)}
        for name in committed:
            await log.commit(name, "t", {0: 0})
        end = 0
        for appended, group, commit_to, by_size in steps:
            if appended:
                await _append(log, "t", appended)
                end += appended
            name = f"g{group}"
            target = min(commit_to, end)
            if target > committed.get(name, 0):
                await log.commit(name, "t", {0: target})
                committed[name] = target
            policy = RetentionPolicy(max_bytes=50) if by_size else RetentionPolicy(max_age_s=1)
            await log.trim(policy, FUTURE)
            kept = set((await _offsets(log, "t", 1))[0])
            floor = min(committed.values())
            assert set(range(floor, end)) <= kept
        await log.close()

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(scenario(Path(directory)))


def _checkpointed_size(path) -> int:
    """The file's size once its WAL is copied in: the file alone says little while the
    WAL holds the newest pages (until the WAL reaches 1,000 pages, 8 MB at 8 KB pages)."""
    import sqlite3

    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


async def test_the_log_stays_bounded_under_a_steady_stream_through_a_source(tmp_path):
    """A LocalSource consuming a steady stream with a size limit: retention runs in the
    background, nothing uncommitted is lost, and the file stops growing."""
    path = tmp_path / "log.db"
    # raw values (these would compress 50x): max_bytes counts bytes at rest
    producer_log = await _log(tmp_path, partitions=1, compress=False)
    source = LocalSource(
        "s", LocalLog(path, partitions=1), topic="posts", commit_interval_s=0.01,
        retention=RetentionPolicy(max_bytes=20_000, interval_s=0.05),
    )
    await source.start()
    sizes, seen = [], 0
    for round_ in range(25):
        await _append(producer_log, "posts", 200, size=1000)
        async with asyncio.timeout(30):  # a trimmed unread message would never arrive
            while seen < (round_ + 1) * 200:
                for message in await source.poll(500, 0.5):
                    await source.ack(message, Outcome.DONE)
                    seen += 1
        await source.commit()
        await asyncio.sleep(0.12)  # let the retention loop run (interval 0.05 s)
        sizes.append(_checkpointed_size(path))
    runner = source._retention
    assert runner is not None and runner.trimmed.get("posts", 0) > 4000
    await source.stop()
    # 5 MB went through; the file holds about the last 20 kB plus free pages.
    assert max(sizes[10:]) <= max(sizes[:10]) * 1.1, sizes
    assert seen == 5000
    await producer_log.close()


async def test_a_new_consumer_is_protected_before_its_first_commit(tmp_path):
    """A consumer group that has not committed yet still owns its backlog: starting a
    source registers the group at its positions, so a trim right then keeps everything."""
    producer_log = await _log(tmp_path, partitions=1)
    await _append(producer_log, "posts", 100, size=1000)
    source = LocalSource("s", LocalLog(tmp_path / "log.db", partitions=1), topic="posts")
    await source.start()
    deleted = await producer_log.trim(RetentionPolicy(max_bytes=5_000), time.time())
    assert deleted == {}
    messages = await source.poll(500, 0.5)
    assert [m.offset for m in messages] == list(range(100))
    await source.stop()
    await producer_log.close()


async def test_a_new_log_returns_trimmed_space_to_the_file_system_and_keeps_kb_rows_inline(
        tmp_path):
    """The log's page size and auto-vacuum are set before the file turns WAL (after,
    SQLite ignores them): a trim shrinks the file, and a 1.3 KB message (an annotation
    with its float16 vector) sits in its b-tree page, not in an overflow page of its own."""
    import sqlite3

    log = await _log(tmp_path, partitions=1, compress=False)  # 1.3 KB at rest, too
    with sqlite3.connect(tmp_path / "log.db") as conn:
        assert conn.execute("PRAGMA page_size").fetchone()[0] == 8192
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental
    await _append(log, "annotations", 2000, size=1300)
    full = _checkpointed_size(tmp_path / "log.db")
    assert full < 2000 * 1300 * 1.3  # 4 KB pages: ~2 pages a message, ~8 KB each
    await log.trim(RetentionPolicy(max_age_s=1), FUTURE)
    assert _checkpointed_size(tmp_path / "log.db") < full / 10
    await log.close()


async def test_the_output_topic_keeps_its_own_shorter_age_but_never_past_a_group(tmp_path):
    """The output topic repeats the annotation store: it ages out after its own
    `max_age_by_topic` (an hour by default), the input topic after the log's week; a
    group reading the output topic still keeps what it has not committed."""
    log = await _log(tmp_path, partitions=1)
    await _append(log, "posts", 10)
    await _append(log, "annotations", 10)
    await log.commit("grebe", "posts", {0: 10})
    policy = RetentionPolicy(max_age_s=7 * 86400, max_age_by_topic={"annotations": 3600})
    assert policy.active and policy.max_age_of("posts") == 7 * 86400
    assert await log.trim(policy, time.time() + 60) == {}
    assert await log.trim(policy, time.time() + 2 * 3600) == {"annotations": 10}
    assert (await _offsets(log, "posts", 1))[0] == list(range(10))
    await _append(log, "annotations", 10)
    await log.commit("reader", "annotations", {0: 14})
    assert await log.trim(policy, time.time() + 2 * 3600) == {"annotations": 4}
    assert (await _offsets(log, "annotations", 1))[0] == list(range(14, 20))
    await log.close()


def test_the_output_topic_age_comes_from_the_config_when_output_is_on_the_local_log(
        tmp_path):
    from grebe.brokers.local_backend import local_retention
    from grebe.config import load_config

    default = local_retention(load_config(data_dir=tmp_path, output={"topic": "out"}))
    assert dict(default.max_age_by_topic) == {"out": 3600.0}
    off = local_retention(load_config(data_dir=tmp_path, output={"broker": "none"}))
    assert dict(off.max_age_by_topic) == {}
    same = local_retention(load_config(data_dir=tmp_path,
                                       local={"output_retention_s": None}))
    assert dict(same.max_age_by_topic) == {} and same.max_age_s == 7 * 24 * 3600.0
