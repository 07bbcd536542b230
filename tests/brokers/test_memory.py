import asyncio
import time

import pytest

from grebe.brokers.memory import MemorySource
from grebe.core.source import Outcome, Source
from grebe.errors import BrokerError


def test_is_a_source_and_partitions_by_key() -> None:
    source = MemorySource("s", partitions=4)
    assert isinstance(source, Source)
    a1, a2 = source.put(b"1", key=b"user-a"), source.put(b"2", key=b"user-a")
    assert a1.partition == a2.partition and (a1.offset, a2.offset) == (0, 1)
    spread = {source.put(b"x").partition for _ in range(8)}
    assert spread == {0, 1, 2, 3}  # no key: round-robin


async def test_poll_waits_for_a_put_without_sleeping_out_the_timeout() -> None:
    source = MemorySource("s")
    loop = asyncio.get_running_loop()
    loop.call_later(0.05, source.put, b"late")
    started = time.monotonic()
    batch = await source.poll(10, timeout=5.0)
    assert [m.value for m in batch] == [b"late"]
    assert time.monotonic() - started < 1.0


async def test_poll_times_out_empty_and_respects_max_messages() -> None:
    source = MemorySource("s")
    started = time.monotonic()
    assert await source.poll(10, timeout=0.05) == []
    assert 0.04 < time.monotonic() - started < 1.0
    for i in range(5):
        source.put(str(i).encode())
    assert len(await source.poll(3, timeout=0)) == 3
    assert source.lag() == 2


async def test_commits_follow_the_lowest_unfinished_offset() -> None:
    source = MemorySource("s")
    for i in range(3):
        source.put(str(i).encode())
    m0, m1, m2 = await source.poll(3, 0)
    await source.ack(m2, Outcome.DONE)
    await source.ack(m1, Outcome.DEAD, reason="max_attempts", dead_letter=b"{}")
    assert source.committed == {}
    assert source.unacked == [m0]
    await source.ack(m0, Outcome.DONE)
    assert source.committed == {0: 3}
    assert [a.outcome for a in source.acks] == [Outcome.DONE, Outcome.DEAD, Outcome.DONE]
    assert source.dead_letters == [b"{}"]
    with pytest.raises(BrokerError, match="acked already"):
        await source.ack(m0, Outcome.DONE)


async def test_retry_redelivers_with_the_attempt_count() -> None:
    source = MemorySource("s", handles_retry=True)
    source.put(b"a")
    source.put(b"b")
    (first,) = await source.poll(1, 0)
    await source.ack(first, Outcome.RETRY, reason="boom")
    b, again = await source.poll(5, 0)
    assert (b.value, b.attempt) == (b"b", 1)
    assert (again.value, again.attempt, again.offset) == (b"a", 2, 2)
    plain = MemorySource("p")
    plain.put(b"x")
    (message,) = await plain.poll(1, 0)
    with pytest.raises(BrokerError, match="does not retry"):
        await plain.ack(message, Outcome.RETRY)
    with pytest.raises(BrokerError, match="without a dead letter"):
        await plain.ack(message, Outcome.DEAD)


async def test_wait_acked() -> None:
    source = MemorySource("s")
    source.put(b"a")
    (message,) = await source.poll(1, 0)
    asyncio.get_running_loop().call_soon(
        lambda: asyncio.ensure_future(source.ack(message, Outcome.DONE))
    )
    async with asyncio.timeout(1):
        await source.wait_acked(1)
