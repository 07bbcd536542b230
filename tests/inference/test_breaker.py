"""Circuit breaker transitions, driven by an injected clock (no sleeping)."""

from __future__ import annotations

import asyncio

import pytest

from grebe.errors import CircuitOpenError
from grebe.inference.breaker import BreakerState, CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(clock: Clock, **kw: object) -> CircuitBreaker:
    args: dict[str, object] = {
        "failure_rate_threshold": 0.5,
        "minimum_calls": 4,
        "window_s": 10.0,
        "recovery_timeout_s": 5.0,
        "half_open_max_calls": 2,
        "clock": clock,
    }
    args.update(kw)
    return CircuitBreaker("test", **args)  # type: ignore[arg-type]


def test_stays_closed_below_minimum_calls() -> None:
    breaker = make(Clock())
    for _ in range(3):
        breaker.before_call()
        breaker.record_failure()
    assert breaker.state is BreakerState.CLOSED


def test_opens_at_failure_rate_and_refuses_calls() -> None:
    clock = Clock()
    breaker = make(clock)
    for failed in (False, True, False, True):
        breaker.before_call()
        breaker.record_failure() if failed else breaker.record_success()
    assert breaker.state is BreakerState.OPEN
    with pytest.raises(CircuitOpenError, match=r"retry in 5\.0s"):
        breaker.before_call()


def test_old_outcomes_leave_the_window() -> None:
    clock = Clock()
    breaker = make(clock)
    for _ in range(3):
        breaker.record_failure()
    clock.now += 11  # the three failures age out
    for _ in range(3):
        breaker.record_success()
    breaker.record_failure()
    assert breaker.failure_rate() == 0.25
    assert breaker.state is BreakerState.CLOSED


def test_half_open_after_recovery_timeout_then_closes_on_successful_trials() -> None:
    clock = Clock()
    breaker = make(clock)
    for _ in range(4):
        breaker.record_failure()
    assert breaker.state is BreakerState.OPEN
    clock.now += 4.9
    assert breaker.state is BreakerState.OPEN
    clock.now += 0.2
    assert breaker.state is BreakerState.HALF_OPEN
    breaker.before_call()
    breaker.before_call()
    with pytest.raises(CircuitOpenError, match="half-open"):
        breaker.before_call()  # only two trial calls
    breaker.record_success()
    assert breaker.state is BreakerState.HALF_OPEN
    breaker.record_success()
    assert breaker.state is BreakerState.CLOSED
    assert breaker.failure_rate() == 0.0  # fresh window


def test_failed_trial_reopens_for_a_full_timeout() -> None:
    clock = Clock()
    breaker = make(clock)
    for _ in range(4):
        breaker.record_failure()
    clock.now += 5
    breaker.before_call()
    breaker.record_failure()
    assert breaker.state is BreakerState.OPEN
    clock.now += 4
    assert breaker.state is BreakerState.OPEN
    clock.now += 1
    assert breaker.state is BreakerState.HALF_OPEN


async def test_call_counts_only_failures_the_predicate_accepts() -> None:
    breaker = make(Clock(), is_failure=lambda exc: not isinstance(exc, ValueError))

    async def bad_answer() -> None:
        raise ValueError("model answered nonsense")

    async def down() -> None:
        raise ConnectionError("refused")

    for _ in range(5):
        with pytest.raises(ValueError):
            await breaker.call(bad_answer)
    assert breaker.state is BreakerState.CLOSED
    for _ in range(5):
        with pytest.raises(ConnectionError):
            await breaker.call(down)
    assert breaker.state is BreakerState.OPEN
    with pytest.raises(CircuitOpenError):
        await breaker.call(down)


async def test_cancelled_trial_frees_its_slot() -> None:
    clock = Clock()
    breaker = make(clock, half_open_max_calls=1)
    for _ in range(4):
        breaker.record_failure()
    clock.now += 5

    async def hang() -> None:
        await asyncio.Event().wait()

    task = asyncio.create_task(breaker.call(hang))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert breaker.state is BreakerState.HALF_OPEN
    breaker.before_call()  # the slot is free again


def test_invalid_settings() -> None:
    with pytest.raises(ValueError):
        CircuitBreaker(failure_rate_threshold=0)
    with pytest.raises(ValueError):
        CircuitBreaker(minimum_calls=0)
