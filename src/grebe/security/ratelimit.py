"""Per-caller request budgets: a moving window per key id (or per client address when
the server runs without keys), so one caller cannot spend everyone's model time."""

from __future__ import annotations

import time

from limits import parse
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from grebe.errors import ConfigError


def valid_rate(rate: str) -> str:
    """`rate` when `limits` can parse it (a config validator: bad rates fail at load)."""
    parse(rate)
    return rate


class CallerRateLimiter:
    def __init__(self, rate: str) -> None:
        try:
            self.limit = parse(rate)
        except ValueError as exc:
            raise ConfigError(f"rate limit {rate!r}: {exc} (e.g. '60/minute')") from exc
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    def retry_after_s(self, caller: str) -> float | None:
        """None when `caller` may go on (and the call is counted); else seconds to wait."""
        if self._limiter.hit(self.limit, caller):
            return None
        reset_at = self._limiter.get_window_stats(self.limit, caller).reset_time
        return max(1.0, reset_at - time.time())
