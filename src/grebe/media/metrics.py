"""Per-stage numbers of the media pipeline: an in-process snapshot, and Prometheus.

Metric names are fixed; the stage goes in the `stage` label (never into the name).
`StageStats` is always kept (the CLI prints it); Prometheus only when a `MediaMetrics`
is given — build one per registry, once per process, like core.metrics.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

ITEMS = "grebe_media_stage_items"  # exported with the _total suffix
SECONDS = "grebe_media_stage_seconds"
QUEUE_DEPTH = "grebe_media_stage_queue_depth"
LABEL_STAGE = "stage"
LABEL_OUTCOME = "outcome"
OUTCOME_OK = "ok"
OUTCOME_ERROR = "error"

# From a 1 ms cache hit to a minute-long transcription.
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# Latencies kept per stage for p50/p99: the most recent ones only, so a pipeline that
# runs for days holds a fixed amount (a mean and a max alone hide a slow tail).
RECENT_LATENCIES = 1024


@dataclass
class StageStats:
    """Counts and latency of one stage since start; `queue_depth` is the current backlog,
    `peak_queue_depth` the largest seen (a snapshot taken after a run has drained shows 0,
    so a bench needs the peak to see where work piled up); p50/p99 are over the last
    RECENT_LATENCIES items."""

    workers: int
    processed: int = 0
    errors: int = 0
    busy_s: float = 0.0
    max_s: float = 0.0
    queue_depth: int = 0
    peak_queue_depth: int = 0
    recent_s: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_LATENCIES))

    def record(self, seconds: float, ok: bool) -> None:
        self.processed += 1
        self.errors += 0 if ok else 1
        self.busy_s += seconds
        self.max_s = max(self.max_s, seconds)
        self.recent_s.append(seconds)

    def quantile_ms(self, q: float) -> float:
        """The q-quantile of the recent latencies (nearest rank), in ms; 0 when none."""
        if not self.recent_s:
            return 0.0
        ordered = sorted(self.recent_s)
        return 1000 * ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    def observe_depth(self, depth: int) -> None:
        self.queue_depth = depth
        self.peak_queue_depth = max(self.peak_queue_depth, depth)

    @property
    def mean_ms(self) -> float:
        return 1000 * self.busy_s / self.processed if self.processed else 0.0

    def snapshot(self) -> dict[str, float | int]:
        return {
            "workers": self.workers, "processed": self.processed, "errors": self.errors,
            "mean_ms": round(self.mean_ms, 2), "max_ms": round(1000 * self.max_s, 2),
            "p50_ms": round(self.quantile_ms(0.5), 2), "p99_ms": round(self.quantile_ms(0.99), 2),
            "queue_depth": self.queue_depth, "peak_queue_depth": self.peak_queue_depth,
        }


class MediaMetrics:
    """Prometheus collectors for the pipeline stages."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self._items = Counter(ITEMS, "Media items a pipeline stage finished, by outcome.",
                              [LABEL_STAGE, LABEL_OUTCOME], registry=registry)
        self._seconds = Histogram(SECONDS, "Time one media item spent in a stage.",
                                  [LABEL_STAGE], buckets=BUCKETS, registry=registry)
        self._depth = Gauge(QUEUE_DEPTH, "Media items waiting for a stage.", [LABEL_STAGE],
                            registry=registry)

    def finished(self, stage: str, seconds: float, ok: bool) -> None:
        self._items.labels(stage, OUTCOME_OK if ok else OUTCOME_ERROR).inc()
        self._seconds.labels(stage).observe(seconds)

    def queue_depth(self, stage: str, depth: int) -> None:
        self._depth.labels(stage).set(depth)
