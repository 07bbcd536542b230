"""Admission control of `feed-serve`: a bounded number of home requests at once.

A home request is CPU in the server's one event loop, so requests admitted together
share it: with no bound, offered load above what the core sustains queues without limit
and every request's latency grows with the queue. With a bound of N, a request waits
behind at most N-1 others and the rest are told at once (503 with Retry-After) to come
back later, which is cheap for the server and lets a client or load balancer go
elsewhere. Not a semaphore that waits: waiting is exactly the unbounded queue.
"""

from __future__ import annotations


class Admission:
    """Counts requests in flight; `try_enter` refuses beyond `limit`."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"admission limit must be >= 1, got {limit}")
        self.limit = limit
        self.in_flight = 0
        self.admitted = 0
        self.rejected = 0

    def try_enter(self) -> bool:
        if self.in_flight >= self.limit:
            self.rejected += 1
            return False
        self.in_flight += 1
        self.admitted += 1
        return True

    def leave(self) -> None:
        self.in_flight -= 1
