"""The API's own counters: exported on /metrics beside the runtime's, and shown by the
status page (which reads the plain totals kept here, not prometheus internals)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from grebe.core.metrics import DURATION_BUCKETS

POSTS_ACCEPTED = "grebe_api_posts_accepted"  # exported with the _total suffix
REQUESTS_REFUSED = "grebe_api_requests_refused"
ANALYZE_DURATION = "grebe_api_analyze_duration_seconds"
LABEL_REASON = "reason"

REFUSED_INVALID = "invalid"  # 422: a post failed validation
REFUSED_TOO_LARGE = "too_large"  # 413: too many posts or bytes
REFUSED_UNAVAILABLE = "unavailable"  # 503: stopping, or the broker failed


class ApiMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self._accepted = Counter(
            POSTS_ACCEPTED, "Posts appended to the intake stream by POST /v1/posts.",
            registry=registry,
        )
        self._refused = Counter(
            REQUESTS_REFUSED, "POST /v1/posts requests refused, nothing appended.",
            [LABEL_REASON], registry=registry,
        )
        self._analyze = Histogram(
            ANALYZE_DURATION, "POST /v1/analyze: every flow on one post.",
            buckets=DURATION_BUCKETS, registry=registry,
        )
        self.posts_accepted = 0
        self.requests_refused = 0
        self.analyzed = 0

    def accepted(self, n: int) -> None:
        self.posts_accepted += n
        self._accepted.inc(n)

    def refused(self, reason: str) -> None:
        self.requests_refused += 1
        self._refused.labels(reason).inc()

    def analysis(self, seconds: float) -> None:
        self.analyzed += 1
        self._analyze.observe(seconds)

    def totals(self) -> dict[str, int]:
        return {"posts_accepted": self.posts_accepted,
                "requests_refused": self.requests_refused, "analyzed": self.analyzed}
