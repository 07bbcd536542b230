"""Exponential backoff with full jitter, for redelivering failed posts.

Full jitter (delay drawn uniformly from [0, cap]) spreads the retries of a burst of
failures, e.g. a model backend that fell over for everyone at once, so they do not come
back as a burst. tenacity's `wait_random_exponential` computes the same thing, but on the
global `random` and a RetryState; the dispatcher needs a seeded RNG for reproducible
tests and calls this once per failure, so it is these few lines instead.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Backoff:
    """delay(attempt) = uniform(0, min(max_s, base_s * 2 ** (attempt - 1)))."""

    base_s: float
    max_s: float
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.base_s < 0 or self.max_s < 0:
            raise ValueError(f"backoff base and max must be >= 0, got {self.base_s}, {self.max_s}")

    def ceiling(self, attempt: int) -> float:
        """The largest delay for the retry following failed `attempt` (1-based)."""
        if attempt < 1:
            raise ValueError(f"attempt is 1-based, got {attempt}")
        # Cap the exponent: 2 ** 1100 overflows a float long before anyone retries that often.
        return min(self.max_s, self.base_s * 2.0 ** min(attempt - 1, 1023))

    def delay(self, attempt: int) -> float:
        return self.rng.uniform(0.0, self.ceiling(attempt))
