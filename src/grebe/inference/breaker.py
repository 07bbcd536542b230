"""A circuit breaker for remote model backends.

When an endpoint is down, every task waiting on it for a full timeout (plus retries)
stalls the whole pipeline; failing fast lets a FallbackChatModel move to the next
backend and lets the dispatcher retry later. States:

- CLOSED: calls pass. Outcomes are kept for `window_s`; once at least `minimum_calls`
  are in the window and the failure rate reaches `failure_rate_threshold`, it OPENs.
- OPEN: calls raise CircuitOpenError without being attempted, for `recovery_timeout_s`.
- HALF_OPEN: up to `half_open_max_calls` trial calls pass (others are refused); if they
  all succeed it CLOSEs with a fresh window, and any failure re-OPENs it.

The clock is injectable so transitions are tested without sleeping.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from prometheus_client import Gauge

from grebe.errors import CircuitOpenError

R = TypeVar("R")

BREAKER_STATE = Gauge(
    "grebe_inference_breaker_state",
    "Circuit breaker state: 0 closed, 1 open, 2 half-open.",
    ["breaker"],
)


class BreakerState(enum.IntEnum):
    CLOSED = 0
    OPEN = 1
    HALF_OPEN = 2


class CircuitBreaker:
    def __init__(
        self,
        name: str = "breaker",
        *,
        failure_rate_threshold: float = 0.5,
        minimum_calls: int = 10,
        window_s: float = 60.0,
        recovery_timeout_s: float = 30.0,
        half_open_max_calls: int = 1,
        is_failure: Callable[[BaseException], bool] = lambda exc: True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < failure_rate_threshold <= 1:
            raise ValueError("failure_rate_threshold must be in (0, 1]")
        if minimum_calls < 1 or half_open_max_calls < 1:
            raise ValueError("minimum_calls and half_open_max_calls must be >= 1")
        self.name = name
        self.failure_rate_threshold = failure_rate_threshold
        self.minimum_calls = minimum_calls
        self.window_s = window_s
        self.recovery_timeout_s = recovery_timeout_s
        self.half_open_max_calls = half_open_max_calls
        self.is_failure = is_failure
        self._clock = clock
        self._outcomes: deque[tuple[float, bool]] = deque()  # (time, failed)
        self._state = BreakerState.CLOSED
        self._opened_at = 0.0
        self._trials_started = 0
        self._trials_succeeded = 0
        BREAKER_STATE.labels(name).set(BreakerState.CLOSED)

    @property
    def state(self) -> BreakerState:
        if (
            self._state is BreakerState.OPEN
            and self._clock() - self._opened_at >= self.recovery_timeout_s
        ):
            self._transition(BreakerState.HALF_OPEN)
        return self._state

    def failure_rate(self) -> float:
        self._evict()
        if not self._outcomes:
            return 0.0
        return sum(failed for _, failed in self._outcomes) / len(self._outcomes)

    # -- the call protocol ------------------------------------------------------------

    def before_call(self) -> None:
        """Raise CircuitOpenError if the call must not be attempted now."""
        state = self.state
        if state is BreakerState.OPEN:
            retry_in = self.recovery_timeout_s - (self._clock() - self._opened_at)
            raise CircuitOpenError(f"{self.name}: circuit open, retry in {retry_in:.1f}s")
        if state is BreakerState.HALF_OPEN:
            if self._trials_started >= self.half_open_max_calls:
                raise CircuitOpenError(f"{self.name}: circuit half-open, trial calls in flight")
            self._trials_started += 1

    def record_success(self) -> None:
        if self._state is BreakerState.HALF_OPEN:
            self._trials_succeeded += 1
            if self._trials_succeeded >= self.half_open_max_calls:
                self._transition(BreakerState.CLOSED)
            return
        self._record(failed=False)

    def record_failure(self) -> None:
        if self._state is BreakerState.HALF_OPEN:
            self._transition(BreakerState.OPEN)
            return
        if self._state is BreakerState.OPEN:
            return  # a straggler that started before the circuit opened
        self._record(failed=True)
        if (
            len(self._outcomes) >= self.minimum_calls
            and self.failure_rate() >= self.failure_rate_threshold
        ):
            self._transition(BreakerState.OPEN)

    async def call(self, fn: Callable[[], Awaitable[R]]) -> R:
        """Run `fn()` under the breaker; exceptions for which `is_failure` is false
        (e.g. a model's badly-formed answer) count as successes of the backend."""
        self.before_call()
        try:
            result = await fn()
        except BaseException as exc:
            if isinstance(exc, Exception) and self.is_failure(exc):
                self.record_failure()
            elif isinstance(exc, Exception):
                self.record_success()
            else:
                self._release_trial()  # cancelled: no verdict on the backend
            raise
        self.record_success()
        return result

    # -- internals ----------------------------------------------------------------------

    def _release_trial(self) -> None:
        if self._state is BreakerState.HALF_OPEN and self._trials_started > 0:
            self._trials_started -= 1

    def _record(self, *, failed: bool) -> None:
        self._outcomes.append((self._clock(), failed))
        self._evict()

    def _evict(self) -> None:
        horizon = self._clock() - self.window_s
        while self._outcomes and self._outcomes[0][0] < horizon:
            self._outcomes.popleft()

    def _transition(self, state: BreakerState) -> None:
        self._state = state
        self._trials_started = 0
        self._trials_succeeded = 0
        if state is BreakerState.OPEN:
            self._opened_at = self._clock()
        if state is BreakerState.CLOSED:
            self._outcomes.clear()
        BREAKER_STATE.labels(self.name).set(state)
