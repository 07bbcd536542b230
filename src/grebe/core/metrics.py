"""What the runtime reports, behind a small hook so core/ does not depend on an exporter.

`DispatcherMetrics` is the hook the dispatcher (and the engine, for plan timings) calls;
`PrometheusMetrics` implements it with prometheus-client under fixed metric names (never
built from variables; the source, plan or reason goes in a label). Counts arrive in
batches, so a busy dispatcher touches a counter once per batch, not once per message.
Labelled children are cached per label value: `Counter.labels()` validates and hashes
its arguments under a lock on every call (~1-2 us), which at tens of thousands of posts
per second is a visible share of the dispatcher's CPU.
"""

from __future__ import annotations

from typing import Any, Protocol

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

RECEIVED = "grebe_dispatcher_received"  # exported with the _total suffix
DONE = "grebe_dispatcher_done"
RETRIED = "grebe_dispatcher_retried"
DEAD_LETTERED = "grebe_dispatcher_dead_lettered"
IN_FLIGHT = "grebe_dispatcher_in_flight"
SOURCE_LAG = "grebe_source_lag"
TASK_DURATION = "grebe_task_duration_seconds"
PLAN_DURATION = "grebe_plan_duration_seconds"
NOT_SELECTED = "grebe_dispatcher_not_selected"  # posts a stream's selection skipped

LABEL_SOURCE = "source"
LABEL_REASON = "reason"
LABEL_PLAN = "plan"

# Tasks run from ~1 ms (text filters) to tens of seconds (video transcription).
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class DispatcherMetrics(Protocol):
    def received(self, source: str, n: int) -> None: ...

    def done(self, source: str, n: int) -> None: ...

    def retried(self, source: str, n: int) -> None: ...

    def dead_lettered(self, source: str, reason: str, n: int) -> None: ...

    def in_flight(self, n: int) -> None: ...

    def lag(self, source: str, messages: int) -> None: ...

    def task_duration(self, source: str, seconds: float) -> None:
        """One payload, all its plans, as the executor timed it (TaskResult timing)."""
        ...

    def plan_duration(self, plan: str, seconds: float) -> None:
        """One plan of one payload; called by the engine that runs plans."""
        ...

    def not_selected(self, source: str, reason: str) -> None:
        """One post its stream's selection skipped (grebe.selection), with the rule."""
        ...


class NullMetrics:
    """The default hook: records nothing."""

    def received(self, source: str, n: int) -> None:
        pass

    def done(self, source: str, n: int) -> None:
        pass

    def retried(self, source: str, n: int) -> None:
        pass

    def dead_lettered(self, source: str, reason: str, n: int) -> None:
        pass

    def in_flight(self, n: int) -> None:
        pass

    def lag(self, source: str, messages: int) -> None:
        pass

    def task_duration(self, source: str, seconds: float) -> None:
        pass

    def plan_duration(self, plan: str, seconds: float) -> None:
        pass

    def not_selected(self, source: str, reason: str) -> None:
        pass


class _Children(dict[Any, Any]):
    """A metric's labelled children by label value (a tuple for several labels), made on
    first use. Label values are few (streams, plans, dead-letter reasons)."""

    __slots__ = ("_metric",)

    def __init__(self, metric: Any) -> None:
        super().__init__()
        self._metric = metric

    def __missing__(self, key: Any) -> Any:
        child = self[key] = (
            self._metric.labels(*key) if isinstance(key, tuple) else self._metric.labels(key)
        )
        return child


class PrometheusMetrics:
    """DispatcherMetrics on prometheus-client. One per registry: metrics register on
    construction, so build it once per process (tests pass a fresh CollectorRegistry)."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self._received = Counter(
            RECEIVED, "Messages polled from a source.", [LABEL_SOURCE], registry=registry
        )
        self._done = Counter(
            DONE, "Messages finished and acked as done.", [LABEL_SOURCE], registry=registry
        )
        self._retried = Counter(
            RETRIED, "Failed attempts sent back for a retry.", [LABEL_SOURCE], registry=registry
        )
        self._dead = Counter(
            DEAD_LETTERED,
            "Messages given up on and dead-lettered.",
            [LABEL_SOURCE, LABEL_REASON],
            registry=registry,
        )
        self._in_flight = Gauge(
            IN_FLIGHT, "Messages held by the dispatcher, retries waiting included.",
            registry=registry,
        )
        self._lag = Gauge(
            SOURCE_LAG, "Messages a source holds that were not handed out yet.",
            [LABEL_SOURCE], registry=registry,
        )
        self._task = Histogram(
            TASK_DURATION, "Time to run every plan of one payload.", [LABEL_SOURCE],
            buckets=DURATION_BUCKETS, registry=registry,
        )
        self._plan = Histogram(
            PLAN_DURATION, "Time to run one plan of one payload.", [LABEL_PLAN],
            buckets=DURATION_BUCKETS, registry=registry,
        )
        self._not_selected = Counter(
            NOT_SELECTED, "Posts a stream's selection skipped (acked, never dead-lettered).",
            [LABEL_SOURCE, LABEL_REASON], registry=registry,
        )
        self._not_selected_by = _Children(self._not_selected)
        self._received_by = _Children(self._received)
        self._done_by = _Children(self._done)
        self._retried_by = _Children(self._retried)
        self._dead_by = _Children(self._dead)
        self._lag_by = _Children(self._lag)
        self._task_by = _Children(self._task)
        self._plan_by = _Children(self._plan)

    def received(self, source: str, n: int) -> None:
        self._received_by[source].inc(n)

    def done(self, source: str, n: int) -> None:
        self._done_by[source].inc(n)

    def retried(self, source: str, n: int) -> None:
        self._retried_by[source].inc(n)

    def dead_lettered(self, source: str, reason: str, n: int) -> None:
        self._dead_by[source, reason].inc(n)

    def in_flight(self, n: int) -> None:
        self._in_flight.set(n)

    def lag(self, source: str, messages: int) -> None:
        self._lag_by[source].set(messages)

    def task_duration(self, source: str, seconds: float) -> None:
        self._task_by[source].observe(seconds)

    def plan_duration(self, plan: str, seconds: float) -> None:
        self._plan_by[plan].observe(seconds)

    def not_selected(self, source: str, reason: str) -> None:
        self._not_selected_by[source, reason].inc()
