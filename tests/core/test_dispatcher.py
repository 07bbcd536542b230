import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from grebe.brokers.memory import MemorySource
from grebe.codec import decode_dead_letter, encode
from grebe.core.dispatcher import Dispatcher, Stream
from grebe.core.metrics import PrometheusMetrics
from grebe.core.ratelimit import qps_item
from grebe.core.settings import DispatcherSettings, StreamSettings
from grebe.core.source import Message, Outcome
from grebe.types import Envelope, Post, TaskPayload, TaskResult, User

Verdict = Callable[[TaskPayload], "TaskResult | BaseException"]


def post_bytes(i: int) -> bytes:
    post = Post(id=str(i), author_id="a", text=f"post {i}")
    return encode(Envelope(post=post, user=User(id="a")))


def ok(payload: TaskPayload) -> TaskResult:
    return TaskResult(payload_id=payload.payload_id, post_id=payload.post.id, success=True)


def failed(error: str) -> Verdict:
    def verdict(payload: TaskPayload) -> TaskResult:
        return TaskResult(
            payload_id=payload.payload_id, post_id=payload.post.id, success=False, error=error
        )

    return verdict


class ScriptedExecutor:
    """Resolves each future after `hold_s` with what `verdict` says; records what it saw."""

    def __init__(self, verdict: Verdict = ok, hold_s: float = 0.0) -> None:
        self.verdict = verdict
        self.hold_s = hold_s
        self.seen: list[tuple[float, TaskPayload]] = []
        self.running = 0
        self.max_running = 0
        self.on_submit: Callable[[TaskPayload], None] | None = None

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def submit(self, payload: TaskPayload) -> asyncio.Future[TaskResult]:
        loop = asyncio.get_running_loop()
        self.seen.append((time.monotonic(), payload))
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        if self.on_submit:
            self.on_submit(payload)
        future: asyncio.Future[TaskResult] = loop.create_future()

        def resolve() -> None:
            self.running -= 1
            outcome = self.verdict(payload)
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

        if self.hold_s:
            loop.call_later(self.hold_s * random.random(), resolve)
        else:
            loop.call_soon(resolve)
        return future


class ManualExecutor:
    """Futures the test resolves by hand."""

    def __init__(self) -> None:
        self.pending: list[tuple[TaskPayload, asyncio.Future[TaskResult]]] = []
        self.arrived = asyncio.Event()

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def submit(self, payload: TaskPayload) -> asyncio.Future[TaskResult]:
        future: asyncio.Future[TaskResult] = asyncio.get_running_loop().create_future()
        self.pending.append((payload, future))
        self.arrived.set()
        return future

    async def wait_pending(self, n: int) -> None:
        async with asyncio.timeout(2):
            while len(self.pending) < n:
                self.arrived.clear()
                await self.arrived.wait()


def config(**overrides: object) -> DispatcherSettings:
    base: dict[str, object] = dict(
        max_in_flight=256, max_attempts=3, backoff_base_s=0.001, backoff_max_s=0.01,
        poll_batch=64, poll_timeout_s=0.05,
    )
    base.update(overrides)
    return DispatcherSettings(**base)  # type: ignore[arg-type]


def stream(source: MemorySource, **overrides: object) -> Stream:
    return Stream(source, StreamSettings(name=source.name, **overrides))  # type: ignore[arg-type]


class Running:
    """Runs a dispatcher in the background for the length of an `async with`."""

    def __init__(self, dispatcher: Dispatcher, drain_window_s: float = 2.0) -> None:
        self.dispatcher = dispatcher
        self.drain_window_s = drain_window_s
        self.drained: bool | None = None

    async def __aenter__(self) -> Dispatcher:
        self.task = asyncio.create_task(self.dispatcher.run())
        return self.dispatcher

    async def __aexit__(self, *exc: object) -> None:
        self.drained = await self.dispatcher.stop(self.drain_window_s)
        async with asyncio.timeout(2):
            await self.task


async def until(check: Callable[[], bool], within_s: float = 10.0) -> None:
    """Wait for observable state instead of sleeping a guessed time."""
    async with asyncio.timeout(within_s):
        while not check():  # noqa: ASYNC110  # plain attributes: no event to wait on
            await asyncio.sleep(0.005)


async def acked(source: MemorySource, n: int, within_s: float = 3.0) -> None:
    async with asyncio.timeout(within_s):
        await source.wait_acked(n)


# --- multiplexing -----------------------------------------------------------------


async def test_weighted_multiplex_follows_weights_1_2_5() -> None:
    sources = [MemorySource(name) for name in ("one", "two", "five")]
    for source in sources:
        for i in range(4000):
            source.put(post_bytes(i))
    executor = ScriptedExecutor()
    polls = 4000
    enough = asyncio.Event()
    executor.on_submit = lambda _: len(executor.seen) >= polls and enough.set()
    streams = [stream(s, weight=w) for s, w in zip(sources, (1, 2, 5), strict=True)]
    dispatcher = Dispatcher(streams, executor, config(poll_batch=1), rng=random.Random(1234))
    async with Running(dispatcher):
        async with asyncio.timeout(10):
            await enough.wait()
    counts = Counter(p.source for _, p in executor.seen[:polls])
    expected = {"one": polls / 8, "two": polls * 2 / 8, "five": polls * 5 / 8}
    chi_square = sum((counts[k] - e) ** 2 / e for k, e in expected.items())
    assert chi_square < 13.8, (counts, chi_square)  # df=2, p=0.001


class CountingSource(MemorySource):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.polls = 0
        self.blocking_polls = 0

    async def poll(self, max_messages: int, timeout: float) -> list[Message]:  # noqa: ASYNC109
        self.polls += 1
        self.blocking_polls += timeout > 0
        return await super().poll(max_messages, timeout)


async def test_empty_stream_is_skipped_but_not_starved() -> None:
    idle, busy = CountingSource("idle"), CountingSource("busy")
    for i in range(3000):
        busy.put(post_bytes(i))
    executor = ScriptedExecutor()
    streams = [stream(idle, weight=100), stream(busy, weight=1)]
    dispatcher = Dispatcher(streams, executor, config(poll_batch=1), rng=random.Random(5))
    async with Running(dispatcher):
        await acked(busy, 1000)
        # Despite weight 100:1, the empty stream gets at most every other round...
        assert idle.polls <= busy.polls + 2
        assert idle.blocking_polls == 0  # ...and never blocks the busy one
        idle.put(post_bytes(-1))
        await acked(idle, 1, within_s=1.0)  # ...and is still polled: not starved


async def test_all_empty_blocks_in_the_poll_not_a_spin() -> None:
    a, b = CountingSource("a"), CountingSource("b")
    executor = ScriptedExecutor()
    dispatcher = Dispatcher([stream(a), stream(b)], executor, config(poll_timeout_s=0.1))
    async with Running(dispatcher):
        await until(lambda: a.blocking_polls >= 3 and b.blocking_polls >= 3)
        # A handful of polls for three blocking rounds each, not thousands of spins
        # (counted, not timed: a busy box slows both alike).
        assert a.polls + b.polls < 30


async def test_a_message_wakes_an_idle_dispatcher_before_its_poll_times_out() -> None:
    a, b = CountingSource("a"), CountingSource("b")
    executor = ScriptedExecutor()
    timeout = 10.0  # a timer-driven pick-up would take this long; a wake-up takes ms
    dispatcher = Dispatcher([stream(a), stream(b)], executor, config(poll_timeout_s=timeout))
    async with Running(dispatcher, drain_window_s=timeout):
        await until(lambda: a.blocking_polls + b.blocking_polls >= 1)
        started = time.monotonic()
        b.put(post_bytes(1))
        await acked(b, 1, within_s=timeout)
        assert time.monotonic() - started < timeout / 2  # woken by the message


# --- rate limits --------------------------------------------------------------------


def test_qps_item_keeps_fractional_budgets_exact() -> None:
    assert (qps_item(100).amount, qps_item(100).multiples) == (100, 1)
    assert (qps_item(2.5).amount, qps_item(2.5).multiples) == (5, 2)
    assert (qps_item(0.5).amount, qps_item(0.5).multiples) == (1, 2)


async def test_throttled_stream_does_not_hold_back_the_others() -> None:
    slow, fast = MemorySource("slow"), MemorySource("fast")
    for i in range(500):
        slow.put(post_bytes(i))
        fast.put(post_bytes(i))
    executor = ScriptedExecutor()
    streams = [stream(slow, max_qps=20, weight=10), stream(fast)]
    dispatcher = Dispatcher(streams, executor, config(poll_batch=16))
    async with Running(dispatcher):
        await acked(fast, 500)
    assert len(slow.acks) <= 40  # at most one full window and a bit: 20 per second


def max_in_any_window(times: list[float], window_s: float = 1.0) -> int:
    """Most timestamps within any `window_s` of each other (a moving window's view)."""
    times = sorted(times)
    most, first = 0, 0
    for last, t in enumerate(times):
        while t - times[first] >= window_s:
            first += 1
        most = max(most, last - first + 1)
    return most


@pytest.mark.slow
async def test_measured_qps_keeps_to_the_budget_and_uses_it() -> None:
    source = MemorySource("limited")
    for i in range(2000):
        source.put(post_bytes(i))
    executor = ScriptedExecutor()
    budget = 150.0
    dispatcher = Dispatcher([stream(source, max_qps=budget)], executor, config())
    async with Running(dispatcher):
        await until(lambda: len(executor.seen) >= 6 * budget, within_s=30)
    times = [t for t, _ in executor.seen]
    # Never over: no two seconds hold more than twice the budget, plus one poll batch
    # (64) of jitter between the limiter's clock and the submit times; an unlimited or
    # doubled budget is far above.
    assert max_in_any_window(times, 2.0) <= 2 * budget + 64, max_in_any_window(times, 2.0)
    # And used: over five steady seconds the rate is near the budget (loose below: a
    # busy box delays the wake-ups that open each new window).
    start = times[0] + 0.5
    measured = sum(start <= t < start + 5.0 for t in times) / 5.0
    assert budget * 0.7 <= measured <= budget * 1.05, measured


# --- in-flight cap ------------------------------------------------------------------


async def test_max_in_flight_is_never_exceeded() -> None:
    source = MemorySource("s", partitions=3)
    for i in range(1500):
        source.put(post_bytes(i))
    executor = ScriptedExecutor(hold_s=0.003)
    dispatcher = Dispatcher([stream(source)], executor, config(max_in_flight=16, poll_batch=64))
    over: list[int] = []
    executor.on_submit = lambda _: dispatcher.in_flight > 16 and over.append(dispatcher.in_flight)
    async with Running(dispatcher):
        await acked(source, 1500, within_s=10)
    assert executor.max_running == 16  # reached, never passed
    assert over == []
    assert source.committed == {0: 500, 1: 500, 2: 500}


# --- retries and dead letters -------------------------------------------------------


class MaxRandom(random.Random):
    """Full jitter at its ceiling, so backoff delays are known."""

    def uniform(self, a: float, b: float) -> float:
        return b


async def test_failures_retry_with_backoff_then_dead_letter() -> None:
    source = MemorySource("s")
    message = source.put(post_bytes(7), key=b"k")
    executor = ScriptedExecutor(failed("classifier timed out"))
    cfg = config(max_attempts=3, backoff_base_s=0.05, backoff_max_s=1.0)
    dispatcher = Dispatcher([stream(source)], executor, cfg, rng=MaxRandom())
    async with Running(dispatcher):
        await acked(source, 1)
    assert [p.attempt for _, p in executor.seen] == [1, 2, 3]
    assert {p.payload_id for _, p in executor.seen} == {"s:0:0"}
    gaps = [b[0] - a[0] for a, b in zip(executor.seen, executor.seen[1:], strict=False)]
    assert 0.05 <= gaps[0] < 0.09 and 0.1 <= gaps[1] < 0.15  # base * 2 ** (attempt - 1)
    (ack,) = source.acks
    assert ack.outcome is Outcome.DEAD and ack.reason == "max_attempts"
    letter = decode_dead_letter(source.dead_letters[0])
    assert (letter.reason, letter.attempts, letter.last_error) == (
        "max_attempts", 3, "classifier timed out",
    )
    assert (letter.original, letter.key, letter.offset, letter.source) == (
        message.value, b"k", 0, "s",
    )
    assert (dispatcher.stats.retried, dispatcher.stats.dead, dispatcher.stats.done) == (2, 1, 0)


async def test_a_raising_executor_is_a_failure_with_its_error() -> None:
    source = MemorySource("s")
    source.put(post_bytes(1))
    executor = ScriptedExecutor(lambda p: RuntimeError("engine died"))
    dispatcher = Dispatcher([stream(source)], executor, config(max_attempts=2))
    async with Running(dispatcher):
        await acked(source, 1)
    letter = decode_dead_letter(source.dead_letters[0])
    assert (letter.attempts, letter.last_error) == (2, "RuntimeError: engine died")


async def test_success_on_retry_is_acked_done() -> None:
    source = MemorySource("s")
    source.put(post_bytes(1))
    executor = ScriptedExecutor(lambda p: ok(p) if p.attempt == 2 else failed("flaky")(p))
    dispatcher = Dispatcher([stream(source)], executor, config())
    async with Running(dispatcher):
        await acked(source, 1)
    assert [a.outcome for a in source.acks] == [Outcome.DONE]
    assert source.dead_letters == [] and source.committed == {0: 1}


async def test_source_that_handles_retry_gets_retry_acks() -> None:
    source = MemorySource("rabbit", handles_retry=True)
    source.put(post_bytes(1))
    source.put(post_bytes(2))
    executor = ScriptedExecutor(
        lambda p: ok(p) if p.post.id == "1" and p.attempt == 2 else failed("nope")(p)
    )
    dispatcher = Dispatcher([stream(source)], executor, config(max_attempts=2))
    async with Running(dispatcher):
        await acked(source, 4)
    outcomes = sorted((a.message.value == post_bytes(1), a.message.attempt, a.outcome)
                      for a in source.acks)
    assert outcomes == [
        (False, 1, Outcome.RETRY), (False, 2, Outcome.DEAD),
        (True, 1, Outcome.RETRY), (True, 2, Outcome.DONE),
    ]
    assert decode_dead_letter(source.dead_letters[0]).attempts == 2


async def test_malformed_messages_are_dead_lettered_at_once_and_dispatch_goes_on() -> None:
    source = MemorySource("s")
    source.put(b"{not json")
    source.put(post_bytes(1))
    source.put(b'{"post": {"id": 5}}')  # id must be a string, author_id is missing
    source.put(post_bytes(2))
    executor = ScriptedExecutor()
    dispatcher = Dispatcher([stream(source, eligibilities=["spam_comment"])], executor, config())
    async with Running(dispatcher):
        await acked(source, 4)
    assert sorted(p.post.id for _, p in executor.seen) == ["1", "2"]
    assert all(p.eligibilities == {"spam_comment"} for _, p in executor.seen)
    dead = [decode_dead_letter(d) for d in source.dead_letters]
    assert [(d.offset, d.reason, d.attempts) for d in dead] == [
        (0, "decode_error", 1), (2, "decode_error", 1),
    ]
    assert dead[0].last_error.startswith("malformed") and dead[0].original == b"{not json"
    assert dead[1].last_error.startswith("schema")
    assert source.committed == {0: 4}


async def test_executor_refusing_a_submit_is_retried() -> None:
    source = MemorySource("s")
    source.put(post_bytes(1))
    executor = ScriptedExecutor()
    calls = 0
    real_submit = executor.submit

    def submit(payload: TaskPayload) -> asyncio.Future[TaskResult]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("pool is restarting")
        return real_submit(payload)

    executor.submit = submit  # type: ignore[method-assign]
    dispatcher = Dispatcher([stream(source)], executor, config())
    async with Running(dispatcher):
        await acked(source, 1)
    assert source.acks[0].outcome is Outcome.DONE and calls == 2


class FlakySource(MemorySource):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.failures = 1

    async def poll(self, max_messages: int, timeout: float) -> list[Message]:  # noqa: ASYNC109
        if self.failures:
            self.failures -= 1
            raise ConnectionError("broker went away")
        return await super().poll(max_messages, timeout)


async def test_a_failing_poll_does_not_stop_the_dispatcher() -> None:
    source = FlakySource("s")
    source.put(post_bytes(1))
    dispatcher = Dispatcher([stream(source)], ScriptedExecutor(), config())
    async with Running(dispatcher):
        await acked(source, 1)
    assert dispatcher.stats.poll_errors == 1


# --- acks and shutdown --------------------------------------------------------------


async def test_acks_only_after_finish_and_commits_stay_behind_unfinished() -> None:
    source = MemorySource("s")
    for i in range(3):
        source.put(post_bytes(i))
    executor = ManualExecutor()
    dispatcher = Dispatcher([stream(source, deadline_s=30)], executor, config())
    async with Running(dispatcher):
        await executor.wait_pending(3)
        await asyncio.sleep(0.02)
        assert source.acks == [] and dispatcher.in_flight == 3
        (p0, f0), (p1, f1), (p2, f2) = executor.pending
        assert p0.deadline is not None and p0.deadline > time.time() + 29
        f1.set_result(ok(p1))
        await acked(source, 1)
        assert source.committed == {}  # offset 0 still running
        f0.set_result(ok(p0))
        await acked(source, 2)
        assert source.committed == {0: 2}
        f2.set_result(ok(p2))
        await acked(source, 3)
        assert source.committed == {0: 3} and dispatcher.in_flight == 0


async def test_stop_returns_as_soon_as_drained() -> None:
    source = MemorySource("s")
    source.put(post_bytes(1))
    executor = ManualExecutor()
    dispatcher = Dispatcher([stream(source)], executor, config())
    run = asyncio.create_task(dispatcher.run())
    await executor.wait_pending(1)
    payload, future = executor.pending[0]
    asyncio.get_running_loop().call_later(0.05, future.set_result, ok(payload))
    started = time.monotonic()
    assert await dispatcher.stop(drain_window_s=10) is True
    assert time.monotonic() - started < 5.0  # returned on the drain, not the 10 s window
    assert [a.outcome for a in source.acks] == [Outcome.DONE]
    await asyncio.wait_for(run, 1)


async def test_stop_leaves_unfinished_work_unacked_after_the_window() -> None:
    source = MemorySource("s")
    source.put(post_bytes(1))
    source.put(post_bytes(2))
    executor = ManualExecutor()
    dispatcher = Dispatcher([stream(source)], executor, config())
    run = asyncio.create_task(dispatcher.run())
    await executor.wait_pending(2)
    executor.pending[0][1].set_result(ok(executor.pending[0][0]))
    started = time.monotonic()
    assert await dispatcher.stop(drain_window_s=0.2) is False
    assert 0.2 <= time.monotonic() - started < 5.0  # the window, not the unfinished post
    await asyncio.wait_for(run, 1)
    assert len(source.acks) == 1 and len(source.unacked) == 1
    executor.pending[1][1].set_result(ok(executor.pending[1][0]))  # too late: never acked
    await asyncio.sleep(0.02)
    assert len(source.acks) == 1 and source.unacked[0].offset == 1


async def test_a_message_waiting_for_its_retry_is_not_acked_on_stop() -> None:
    source = MemorySource("s")
    source.put(post_bytes(1))
    executor = ScriptedExecutor(failed("down"))
    cfg = config(backoff_base_s=30, backoff_max_s=30)
    dispatcher = Dispatcher([stream(source)], executor, cfg, rng=MaxRandom())
    submitted = asyncio.Event()
    executor.on_submit = lambda _: submitted.set()
    run = asyncio.create_task(dispatcher.run())
    async with asyncio.timeout(2):
        await submitted.wait()
    await until(lambda: dispatcher.stats.retried == 1)  # the failure is back, retry scheduled
    assert dispatcher.in_flight == 1  # the retry keeps its slot
    assert await dispatcher.stop(drain_window_s=0.05) is False
    await asyncio.wait_for(run, 1)
    assert source.acks == [] and len(executor.seen) == 1


# --- metrics ------------------------------------------------------------------------


async def test_prometheus_metrics_count_by_source() -> None:
    registry = CollectorRegistry()
    source = MemorySource("posts")
    for i in range(10):
        source.put(post_bytes(i))
    source.put(b"garbage")
    metrics = PrometheusMetrics(registry)
    dispatcher = Dispatcher([stream(source)], ScriptedExecutor(), config(), metrics=metrics)
    async with Running(dispatcher):
        await acked(source, 11)
    metrics.plan_duration("spam", 0.25)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("grebe_dispatcher_received_total", source="posts") == 11
    assert value("grebe_dispatcher_done_total", source="posts") == 10
    assert value("grebe_dispatcher_dead_lettered_total", source="posts",
                 reason="decode_error") == 1
    assert value("grebe_dispatcher_in_flight") == 0
    assert value("grebe_source_lag", source="posts") is not None
    assert value("grebe_plan_duration_seconds_count", plan="spam") == 1


# --- shared budgets -----------------------------------------------------------------


@pytest.mark.integration
async def test_replicas_share_a_qps_budget_through_redis(redis_url: str) -> None:
    import uuid

    name = f"shared-{uuid.uuid4().hex[:8]}"  # a fresh limiter key for this run
    executors, runs = [], []
    for _ in range(2):  # two replicas of one stream, as two consumers of a group would be
        source = MemorySource(name)
        for i in range(300):
            source.put(post_bytes(i))
        executor = ScriptedExecutor()
        executors.append(executor)
        dispatcher = Dispatcher(
            [stream(source, max_qps=40)], executor, config(poll_batch=8),
            limiter_storage=redis_url,
        )
        runs.append(Running(dispatcher))
    async with runs[0], runs[1]:
        await until(lambda: sum(len(e.seen) for e in executors) >= 160, within_s=30)
    times = [t for e in executors for t, _ in e.seen]
    # One shared 40/s: no two seconds of the two replicas together hold more than 80,
    # plus two poll batches (8) of jitter between the limiter's clock and the submit
    # times; private budgets would let 160 through.
    assert max_in_any_window(times, 2.0) <= 2 * 40 + 2 * 8, max_in_any_window(times, 2.0)
