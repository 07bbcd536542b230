"""StageStats: per-stage latency quantiles over a bounded window of recent items."""

from __future__ import annotations

from grebe.media.metrics import RECENT_LATENCIES, StageStats


def test_quantiles_cover_the_recent_items_only_and_memory_stays_bounded() -> None:
    stats = StageStats(workers=1)
    assert stats.snapshot()["p50_ms"] == 0.0 and stats.snapshot()["p99_ms"] == 0.0
    for ms in range(1, 101):
        stats.record(ms / 1000, ok=True)
    snap = stats.snapshot()
    assert (snap["p50_ms"], snap["p99_ms"], snap["max_ms"]) == (50.0, 99.0, 100.0)

    # A long run: the window slides, the totals do not forget.
    for _ in range(10 * RECENT_LATENCIES):
        stats.record(0.002, ok=True)
    snap = stats.snapshot()
    assert len(stats.recent_s) == RECENT_LATENCIES
    assert (snap["p50_ms"], snap["p99_ms"]) == (2.0, 2.0)
    assert snap["max_ms"] == 100.0 and snap["processed"] == 100 + 10 * RECENT_LATENCIES
