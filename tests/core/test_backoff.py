import random

import pytest

from grebe.core.backoff import Backoff


def test_ceiling_doubles_up_to_the_max() -> None:
    backoff = Backoff(base_s=0.5, max_s=3.0)
    assert [backoff.ceiling(a) for a in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff.ceiling(100_000) == 3.0  # no float overflow


def test_full_jitter_spreads_over_zero_to_ceiling() -> None:
    backoff = Backoff(base_s=1.0, max_s=60.0, rng=random.Random(42))
    delays = [backoff.delay(4) for _ in range(5000)]
    assert all(0.0 <= d <= 8.0 for d in delays)
    assert min(delays) < 0.1 and max(delays) > 7.9  # the whole range, not a fixed delay
    assert abs(sum(delays) / len(delays) - 4.0) < 0.15  # uniform: mean = ceiling / 2


def test_injected_rng_makes_delays_reproducible() -> None:
    a = Backoff(0.2, 30.0, random.Random(7))
    b = Backoff(0.2, 30.0, random.Random(7))
    assert [a.delay(n) for n in range(1, 8)] == [b.delay(n) for n in range(1, 8)]


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="1-based"):
        Backoff(0.1, 1.0).delay(0)
    with pytest.raises(ValueError, match=">= 0"):
        Backoff(-1.0, 1.0)
