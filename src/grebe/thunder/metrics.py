"""Thunder's Prometheus metrics. Names are fixed literals here, never built from data.

Each `ThunderMetrics` owns its registry (the process default one only when asked), so a
test can start several services in one process without name clashes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from operator import attrgetter

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from grebe.thunder.store import InNetworkResult, ThunderStore

_PARENT = attrgetter("in_reply_to_post_id")
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)


class ThunderMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.in_flight = Gauge(
            "grebe_thunder_requests_in_flight", "GetInNetworkPosts calls being served", registry=r
        )
        self.requests = Counter(
            "grebe_thunder_requests_total", "GetInNetworkPosts calls by status code",
            ["code"], registry=r,
        )
        self.rejected = Counter(
            "grebe_thunder_requests_rejected_total",
            "Calls shed with RESOURCE_EXHAUSTED because the concurrency limit was reached",
            registry=r,
        )
        self.timeouts = Counter(
            "grebe_thunder_request_timeouts_total",
            "Calls whose time budget ran out (partial results returned)", registry=r,
        )
        self.latency = Histogram(
            "grebe_thunder_request_seconds", "GetInNetworkPosts latency",
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.returned = Histogram(
            "grebe_thunder_returned_posts", "Posts returned per call",
            buckets=(0, 10, 50, 100, 200, 500, 1000, 2000, 5000), registry=r,
        )
        self.ingested = Counter(
            "grebe_thunder_ingest_events_total", "Events consumed, by outcome",
            ["outcome"], registry=r,
        )
        self.ready = Gauge(
            "grebe_thunder_ingest_ready", "1 once ingest caught up with the stream head",
            registry=r,
        )
        self.store_posts = Gauge(
            "grebe_thunder_store_posts", "Posts held in the store", registry=r
        )
        self.store_authors = Gauge(
            "grebe_thunder_store_authors", "Authors with at least one post held", registry=r
        )
        self.freshness = Gauge(
            "grebe_thunder_freshness_seconds",
            "Age of the newest post held (now - its created_at)", registry=r,
        )
        self.ingest_lag = Gauge(
            "grebe_thunder_ingest_lag_seconds",
            "Age of the last message applied when it was applied (0 when idle at head)",
            registry=r,
        )

        self.poll_errors = Counter(
            "grebe_thunder_ingest_errors_total",
            "Failed polls or acks of the stream (ingest retries with backoff)", registry=r,
        )
        self.stalled = Gauge(
            "grebe_thunder_ingest_stalled_seconds",
            "How long ingest has been unable to read the stream (0 while it reads)",
            registry=r,
        )
        self.future_refused = Gauge(
            "grebe_thunder_future_posts_refused",
            "Creates refused because they were dated beyond the clock skew tolerance",
            registry=r,
        )
        self.resolved_replies = Gauge(
            "grebe_thunder_late_parent_replies_resolved",
            "Replies whose context was filled when their parent arrived after them",
            registry=r,
        )
        self.pending_replies = Gauge(
            "grebe_thunder_replies_waiting_for_parent",
            "Replies held while their parent or conversation root has not arrived",
            registry=r,
        )

        self.lag_messages = Gauge(
            "grebe_thunder_ingest_lag_messages",
            "Messages of the assigned partitions not read yet (checked periodically)",
            registry=r,
        )
        # Request statistics (the specification's analysis of each answer).
        self.answer_time_range = Histogram(
            "grebe_thunder_answer_time_range_seconds",
            "Newest minus oldest created_at of the posts returned by one call",
            buckets=(60, 600, 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400), registry=r,
        )
        self.answer_reply_ratio = Histogram(
            "grebe_thunder_answer_reply_ratio", "Share of replies among the posts returned",
            buckets=(0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0), registry=r,
        )
        self.answer_authors = Histogram(
            "grebe_thunder_answer_unique_authors", "Distinct authors among the posts returned",
            buckets=(0, 1, 5, 10, 50, 100, 200, 500, 1000), registry=r,
        )
        self.answer_posts_per_author = Histogram(
            "grebe_thunder_answer_posts_per_author",
            "Posts returned per distinct author (mean over one call)",
            buckets=(1, 1.5, 2, 3, 4, 5, 8), registry=r,
        )
        self.graph_lookups = Counter(
            "grebe_thunder_graph_lookups_total",
            "Calls with an empty following list answered from the social graph",
            registry=r,
        )

    def observe_answer(self, result: InNetworkResult) -> None:
        """Record the request statistics of one answer (nothing for an empty one).
        Distinct authors come counted by the store (`result.authors`)."""
        posts = result.posts
        if not posts:
            return
        # Counted in C (map, list.count): a Python loop over 800 posts per answer
        # cost more than the rest of the call's bookkeeping together.
        replies = len(posts) - list(map(_PARENT, posts)).count(None)
        # Posts come newest first.
        self.answer_time_range.observe(posts[0].created_at - posts[-1].created_at)
        self.answer_reply_ratio.observe(replies / len(posts))
        self.answer_authors.observe(result.authors)
        self.answer_posts_per_author.observe(len(posts) / max(1, result.authors))

    def watch_store(self, store: ThunderStore) -> None:
        """Compute the store gauges at scrape time instead of on every write."""
        self.store_posts.set_function(lambda: len(store))
        self.store_authors.set_function(lambda: store.author_count)
        self.freshness.set_function(
            lambda: max(0.0, time.time() - store.newest_created_at)
            if store.newest_created_at else 0.0
        )

        self.future_refused.set_function(lambda: store.future_refused)
        self.resolved_replies.set_function(lambda: store.resolved_replies)
        self.pending_replies.set_function(lambda: store.pending_count)

    def watch_lag(self, lag_seconds: Callable[[], float]) -> None:
        self.ingest_lag.set_function(lag_seconds)

    def watch_stalled(self, stalled_seconds: Callable[[], float]) -> None:
        self.stalled.set_function(stalled_seconds)
