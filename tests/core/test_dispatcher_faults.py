"""Failures are classified: the system's faults pause intake and never dead-letter a post;
the in-flight count stays exact when intake fails half way through a batch."""

import asyncio
import random
import time

import pytest
from tests.core.test_dispatcher import (
    ManualExecutor,
    Running,
    ScriptedExecutor,
    acked,
    config,
    ok,
    post_bytes,
    stream,
)

from grebe.brokers.memory import MemorySource
from grebe.codec import decode_envelope
from grebe.core import dispatcher as dispatcher_module
from grebe.core.dispatcher import Dispatcher
from grebe.core.executor import ExecutorUnavailableError
from grebe.core.source import Outcome
from grebe.errors import StoreUnavailableError
from grebe.types import TaskPayload, TaskResult


class ZeroRandom(random.Random):
    """Jitter at its low end, so each retry lands inside the pause it started."""

    def random(self) -> float:
        return 0.0


async def until(condition, within_s: float = 5.0) -> None:
    async with asyncio.timeout(within_s):
        while not condition():  # noqa: ASYNC110  # stats and pids have no event
            await asyncio.sleep(0.005)


async def test_unavailable_executor_costs_no_attempt_and_never_dead_letters() -> None:
    """B1: 'giving up on engines' failed every parked post with ExecutorUnavailableError,
    which the dispatcher counted as attempts and dead-lettered as max_attempts."""
    source = MemorySource("s")
    source.put(post_bytes(1))
    refusals = 6  # twice max_attempts

    def verdict(payload: TaskPayload) -> TaskResult | BaseException:
        nonlocal refusals
        if refusals:
            refusals -= 1
            return ExecutorUnavailableError("no engine is up")
        return ok(payload)

    executor = ScriptedExecutor(verdict)
    dispatcher = Dispatcher([stream(source)], executor, config(max_attempts=3))
    async with Running(dispatcher):
        await acked(source, 1)
    assert [a.outcome for a in source.acks] == [Outcome.DONE]
    assert source.dead_letters == []
    assert [p.attempt for _, p in executor.seen] == [1] * 7
    assert dispatcher.stats.system_faults == 6 and dispatcher.stats.retried == 0


async def test_store_outage_pauses_intake_and_loses_nothing_to_dead_letters() -> None:
    """B8: a full disk failed every store write; each post was tried 3 times and
    dead-lettered while the dispatcher kept pulling the backlog."""
    source = MemorySource("s")
    for i in range(4):
        source.put(post_bytes(i))
    outage = True

    def verdict(payload: TaskPayload) -> TaskResult:
        if outage:
            return TaskResult(
                payload_id=payload.payload_id, post_id=payload.post.id, success=False,
                error="sink: StoreUnavailableError: database or disk is full",
                system_fault=True,
            )
        return ok(payload)

    executor = ScriptedExecutor(verdict)
    cfg = config(
        max_in_flight=64, max_attempts=3, backoff_base_s=0.05, backoff_max_s=0.2,
        poll_timeout_s=0.01,
    )
    dispatcher = Dispatcher([stream(source)], executor, cfg, rng=ZeroRandom())
    async with Running(dispatcher):
        await until(lambda: dispatcher.stats.system_faults >= 3)
        for i in range(4, 54):  # the backlog grows during the outage...
            source.put(post_bytes(i))
        await until(lambda: dispatcher.stats.system_faults >= 10)
        assert dispatcher.stats.received == 4  # ...and stays in the broker: intake paused
        assert source.acks == [] and source.committed == {}
        outage = False
        await acked(source, 54)
    assert {a.outcome for a in source.acks} == {Outcome.DONE}
    assert source.dead_letters == [] and source.committed == {0: 54}
    assert {p.attempt for _, p in executor.seen} == {1}


async def test_a_post_fault_is_still_retried_then_dead_lettered() -> None:
    source = MemorySource("s")
    source.put(post_bytes(1))
    executor = ScriptedExecutor(lambda p: ValueError("bad post"))
    dispatcher = Dispatcher([stream(source)], executor, config(max_attempts=2))
    async with Running(dispatcher):
        await acked(source, 1)
    assert source.acks[0].outcome is Outcome.DEAD
    assert dispatcher.stats.system_faults == 0


async def test_store_error_raised_by_the_executor_is_a_system_fault() -> None:
    source = MemorySource("s")
    source.put(post_bytes(1))
    failures = 4

    def verdict(payload: TaskPayload) -> TaskResult | BaseException:
        nonlocal failures
        if failures:
            failures -= 1
            return StoreUnavailableError("annotation store: database is locked")
        return ok(payload)

    dispatcher = Dispatcher([stream(source)], ScriptedExecutor(verdict), config(max_attempts=2))
    async with Running(dispatcher):
        await acked(source, 1)
    assert source.acks[0].outcome is Outcome.DONE and source.dead_letters == []


async def test_intake_failing_mid_batch_keeps_the_in_flight_count_exact(monkeypatch) -> None:
    """B10: a poll that raised after submitting part of its batch gave back every slot
    it reserved, including those the submitted messages held: unfinished=-1 later."""
    source = MemorySource("s")
    for i in range(3):
        source.put(post_bytes(i))
    real_decode = dispatcher_module.decode_envelope
    calls = 0

    def decode_then_crash(value: bytes):
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("an unexpected bug in decoding")
        return real_decode(value)

    monkeypatch.setattr(dispatcher_module, "decode_envelope", decode_then_crash)
    executor = ManualExecutor()
    dispatcher = Dispatcher([stream(source)], executor, config())
    task = asyncio.create_task(dispatcher.run())
    await executor.wait_pending(1)
    async with asyncio.timeout(2):
        await dispatcher._intake_exited.wait()  # the intake loop died of the bug
    assert dispatcher.in_flight == 1  # the one submitted still holds its slot
    assert not await dispatcher.stop(0.2)  # it never finishes: the dispatcher is dead
    with pytest.raises(RuntimeError, match="unexpected bug"):
        await task
    assert dispatcher.in_flight == 1  # "unfinished=1", left for redelivery, never -1
    assert source.acks == []


async def test_pause_is_observable_while_a_fault_lasts() -> None:
    source = MemorySource("s")
    source.put(post_bytes(1))
    executor = ScriptedExecutor(lambda p: ExecutorUnavailableError("down"))
    cfg = config(backoff_base_s=0.5, backoff_max_s=1.0)
    dispatcher = Dispatcher([stream(source)], executor, cfg)
    async with Running(dispatcher, drain_window_s=0.1):
        await until(lambda: dispatcher.stats.system_faults >= 1)
        assert dispatcher.completer.paused_until > time.time()
    assert source.acks == []  # stopped during the outage: left for redelivery


async def test_a_success_ends_the_pause_at_once() -> None:
    source = MemorySource("s")
    source.put(post_bytes(1))
    failures = 1

    def verdict(payload: TaskPayload) -> TaskResult | BaseException:
        nonlocal failures
        if failures:
            failures -= 1
            return ExecutorUnavailableError("engines restarting")
        return ok(payload)

    cfg = config(backoff_base_s=60.0, backoff_max_s=60.0)
    dispatcher = Dispatcher([stream(source)], ScriptedExecutor(verdict), cfg, rng=ZeroRandom())
    async with Running(dispatcher):
        await until(lambda: dispatcher.stats.system_faults == 1)
        paused_until = dispatcher.completer.paused_until
        assert paused_until > time.time() + 50  # a 60 s pause; the retry comes at 30 s
        entry, timer = next(iter(dispatcher.completer._retries.items()))
        timer.cancel()
        dispatcher.completer._resubmit(entry, False)  # the retry, now rather than in 30 s
        await acked(source, 1)
        assert dispatcher.completer.paused_until == 0.0  # the success ended the pause
        source.put(post_bytes(2))  # and intake takes new posts again at once
        await acked(source, 2)


async def test_an_engine_dying_under_a_post_is_forgiven_until_it_looks_like_the_post() -> None:
    from grebe.core.engine import EngineDiedError

    source = MemorySource("s")
    source.put(post_bytes(1))  # innocent: two engine deaths, then it runs
    source.put(post_bytes(2))  # poison: every engine running it dies
    deaths = {"1": 2}

    def verdict(payload: TaskPayload) -> TaskResult | BaseException:
        if payload.post.id == "2":
            return EngineDiedError("engine 0 went away with the payload")
        if deaths["1"]:
            deaths["1"] -= 1
            return EngineDiedError("engine 0 went away with the payload")
        return ok(payload)

    executor = ScriptedExecutor(verdict)
    dispatcher = Dispatcher([stream(source)], executor, config(max_attempts=3))
    async with Running(dispatcher):
        await acked(source, 2)
    outcomes = {decode_envelope(a.message.value).post.id: a.outcome for a in source.acks}
    assert outcomes == {"1": Outcome.DONE, "2": Outcome.DEAD}
    assert max(p.attempt for _, p in executor.seen if p.post.id == "1") == 1  # forgiven
    # The poison post: 2 deaths forgiven, then 3 counted attempts: 5 deaths in all.
    assert sum(p.post.id == "2" for _, p in executor.seen) == 5
