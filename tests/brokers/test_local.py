import asyncio
import sqlite3

import pytest

from grebe.brokers.local import LocalLog, LocalProducer, LocalSource, partition_for
from grebe.core.source import Outcome
from grebe.errors import BrokerError


@pytest.fixture
async def log(tmp_path):
    log = LocalLog(tmp_path / "log.db", partitions=3)
    await log.open()
    yield log
    await log.close()


def _source(tmp_path, name="posts", **kwargs):
    return LocalSource(
        name, LocalLog(tmp_path / "log.db", partitions=3), topic="posts",
        dead_letter_topic="dlq", **kwargs,
    )


async def test_append_then_read_by_partition_and_offset(log):
    records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(30)]
    positions = await log.append("posts", records)
    # Keys hash to stable partitions; offsets count up from 0 in each partition.
    for (key, _), (part, _) in zip(records, positions, strict=True):
        assert part == partition_for(key, 3, iter([]))  # type: ignore[arg-type]
    for part in range(3):
        offsets = [o for p, o in positions if p == part]
        assert offsets == list(range(len(offsets)))
    got = await log.read("posts", [(p, 0) for p in range(3)], 100)
    assert sorted(r.value for r in got) == sorted(v for _, v in records)
    part, offset = positions[7]
    (first,) = await log.read("posts", [(part, offset)], 1)
    assert (first.key, first.value, first.offset) == (b"k7", b"v7", offset)
    assert sum((await log.end_offsets("posts")).values()) == 30


async def test_keyless_records_spread_round_robin(log):
    positions = await log.append("posts", [(None, b"x")] * 6)
    assert sorted(p for p, _ in positions) == [0, 0, 1, 1, 2, 2]


async def test_topic_keeps_its_partition_count(log, tmp_path):
    await log.topic("posts", 3)
    other = LocalLog(tmp_path / "log.db", partitions=8)
    await other.open()
    try:
        assert (await other.topic("posts")).partitions == 3
        assert (await other.topic("fresh")).partitions == 8
    finally:
        await other.close()


async def test_commits_only_finished_prefix_and_survives_reopen(tmp_path):
    producer = LocalProducer(LocalLog(tmp_path / "log.db", partitions=1))
    await producer.start()
    await producer.publish_many("posts", [(None, str(i).encode()) for i in range(10)])
    await producer.stop()

    source = _source(tmp_path, commit_interval_s=0)
    await source.start()
    messages = await source.poll(10, timeout=1)
    assert [m.offset for m in messages] == list(range(10))
    for m in messages[:4] + messages[5:]:  # offset 4 stays unfinished
        await source.ack(m, Outcome.DONE)
    await source.commit()
    await source.stop()

    reopened = LocalLog(tmp_path / "log.db")
    await reopened.open()
    assert await reopened.committed("grebe", "posts") == {0: 4}
    await reopened.close()

    # A restarted consumer gets the unfinished message (and the ones after it) again.
    source = _source(tmp_path)
    await source.start()
    again = await source.poll(10, timeout=1)
    assert [m.offset for m in again] == list(range(4, 10))
    await source.stop()


async def test_dead_letter_is_written_with_the_commit_that_passes_it(tmp_path):
    log = LocalLog(tmp_path / "log.db", partitions=1)
    await log.open()
    await log.append("posts", [(b"a", b"one"), (b"b", b"two")])
    source = _source(tmp_path, commit_interval_s=0)
    await source.start()
    first, second = await source.poll(10, timeout=1)
    await source.ack(second, Outcome.DEAD, reason="schema", dead_letter=b"DL-two")
    await source.commit()
    # Offset 0 is unfinished, so neither the commit nor the dead letter is stored yet.
    assert await log.read("dlq", [(0, 0)], 10) == []
    assert await log.committed("grebe", "posts") == {}
    await source.ack(first, Outcome.DONE)
    await source.commit()
    dead = await log.read("dlq", [(0, 0)], 10)
    assert [(d.key, d.value) for d in dead] == [(b"b", b"DL-two")]
    assert await log.committed("grebe", "posts") == {0: 2}
    await source.stop()
    await log.close()


async def test_dead_outcome_without_record_is_refused(tmp_path):
    log = LocalLog(tmp_path / "log.db", partitions=1)
    await log.open()
    await log.append("posts", [(None, b"x")])
    source = _source(tmp_path)
    await source.start()
    (message,) = await source.poll(1, timeout=1)
    with pytest.raises(BrokerError, match="dead_letter"):
        await source.ack(message, Outcome.DEAD)
    await source.stop()
    await log.close()


async def test_poll_is_woken_by_a_producer_in_the_same_process(tmp_path):
    source = _source(tmp_path)
    await source.start()
    producer = LocalProducer(LocalLog(tmp_path / "log.db"))
    await producer.start()
    loop = asyncio.get_running_loop()
    started = loop.time()
    poll = asyncio.create_task(source.poll(10, timeout=5))
    await asyncio.sleep(0.3)  # past the poll backoff ceiling: only a wake-up is this fast
    await producer.publish("posts", b"k", b"hello")
    messages = await asyncio.wait_for(poll, 1)
    assert [m.value for m in messages] == [b"hello"]
    assert loop.time() - started < 0.45
    await producer.stop()
    await source.stop()


async def test_poll_returns_empty_after_timeout(tmp_path):
    source = _source(tmp_path)
    await source.start()
    assert await source.poll(10, timeout=0.05) == []
    await source.stop()


async def test_commit_loop_batches_acks_in_the_background(tmp_path):
    log = LocalLog(tmp_path / "log.db", partitions=1)
    await log.open()
    await log.append("posts", [(None, b"x")] * 50)
    source = _source(tmp_path, commit_interval_s=0.01)
    await source.start()
    for m in await source.poll(50, timeout=1):
        await source.ack(m, Outcome.DONE)
    for _ in range(100):
        if await log.committed("grebe", "posts") == {0: 50}:
            break
        await asyncio.sleep(0.01)
    assert await log.committed("grebe", "posts") == {0: 50}
    assert await log.lag("grebe", "posts") == 0
    await source.stop()
    await log.close()


async def test_second_consumer_of_a_group_is_refused(tmp_path):
    first = _source(tmp_path)
    await first.start()
    second = _source(tmp_path, lock_wait_s=0.05)
    with pytest.raises(BrokerError, match="another consumer"):
        await second.start()
    await first.stop()
    await second.start()  # the lock is free again
    await second.stop()


async def test_committed_offsets_never_move_backwards(log):
    await log.topic("posts")
    await log.commit("g", "posts", {0: 10})
    await log.commit("g", "posts", {0: 3})
    assert await log.committed("g", "posts") == {0: 10}


async def test_log_file_is_wal_and_readable_by_plain_sqlite(log, tmp_path):
    await log.append("posts", [(b"k", b"v")])
    conn = sqlite3.connect(tmp_path / "log.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 1
    conn.close()


async def test_stop_during_a_background_commit_writes_each_dead_letter_once(tmp_path):
    """B2: stop() cancelled the committer while its transaction ran in a thread; the
    dead letters stayed in memory and the final commit appended them a second time."""
    log = LocalLog(tmp_path / "log.db", partitions=1)
    await log.open()
    await log.append("posts", [(None, f"m{i}".encode()) for i in range(20)])
    source = _source(tmp_path, commit_interval_s=0)
    await source.start()
    written = asyncio.Event()
    real_commit = source._log.commit

    async def commit_then_linger(*args, **kwargs):
        await real_commit(*args, **kwargs)  # the transaction is in the file...
        written.set()
        await asyncio.sleep(0.5)  # ...and the coroutine has not resumed yet

    source._log.commit = commit_then_linger  # type: ignore[method-assign]
    for m in await source.poll(20, timeout=1):
        await source.ack(m, Outcome.DEAD, reason="schema", dead_letter=b"DL-" + m.value)
    await asyncio.wait_for(written.wait(), 5)  # the background committer is mid-commit
    await source.stop()
    dead = await log.read("dlq", [(0, 0)], 100)
    assert sorted(d.value for d in dead) == sorted(f"DL-m{i}".encode() for i in range(20))
    assert await log.committed("grebe", "posts") == {0: 20}
    await log.close()
