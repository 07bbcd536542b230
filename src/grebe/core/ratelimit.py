"""QPS budgets: the one place that turns a `max_qps` into a `limits` item and a storage
URI into an async limits storage, for the dispatcher's per-stream budgets and for any
flow task that rate-limits a call (grebe.flows.services)."""

from __future__ import annotations

from fractions import Fraction

from limits import RateLimitItem, RateLimitItemPerSecond
from limits.storage import storage_from_string

from grebe import constants as C

RATE_LIMIT_NAMESPACE = "grebe-stream-qps"  # key prefix in the (possibly shared) limiter store
MEMORY_STORAGE_URI = "memory://"


def limiter_uri(storage: str, redis_url: str) -> str:
    """The storage URI for `rate_limits.storage`: in process, or the shared Redis (so
    replicas together keep to a budget)."""
    return redis_url if storage == "redis" else MEMORY_STORAGE_URI


def qps_item(max_qps: float) -> RateLimitItem:
    """A moving-window limit equal to `max_qps`: `amount` per `multiples` seconds, both
    integers as the limits library wants (2.5 qps -> 5 per 2 s)."""
    if max_qps >= 1:
        ratio = Fraction(max_qps).limit_denominator(60)
        return RateLimitItemPerSecond(ratio.numerator, ratio.denominator)
    return RateLimitItemPerSecond(1, max(1, round(1 / max_qps)))


def limiter_storage_from(uri: str, namespace: str = C.DEFAULT_REDIS_NAMESPACE) -> object:
    """`memory://` or `redis://host/db` (as configured) -> an async limits storage. In
    Redis its keys start with `<namespace>:limits`, so deployments sharing a Redis keep
    separate budgets."""
    scheme = uri.split("://", 1)[0]
    if not scheme.startswith("async+"):
        uri = f"async+{uri}"
    if "redis" in scheme:  # redis-py is a dependency; coredis (the limits default) is not
        return storage_from_string(
            uri, implementation="redispy", key_prefix=f"{namespace}:{C.REDIS_LIMITS_SUFFIX}"
        )
    return storage_from_string(uri)
