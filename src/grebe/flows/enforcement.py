"""Enforcement history: what the policy step did to an author before, per category.

Why: a policy that treats the tenth harassment post like the first is easy to game; the
PTOS policy step reads this history and gives a repeat offender (`escalate_after` prior
actions in the category within the window) the category's strictest action. Bounded
twice like grebe.flows.signals.AuthorMemory (an LRU over authors, a fixed deque per
author), per engine process: a restart forgets, which only ever makes the policy milder,
never stricter than the post alone calls for.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from cachetools import LRUCache


@dataclass(frozen=True, slots=True)
class Enforcement:
    post_id: str
    category: str
    action: str
    at: float


class EnforcementHistory:
    """Recent enforcement actions per author; thread-safe for the engine's workers."""

    def __init__(self, *, authors: int, entries_per_author: int,
                 clock: Callable[[], float] = time.time) -> None:
        self._recent: LRUCache[str, deque[Enforcement]] = LRUCache(maxsize=authors)
        self._per_author = entries_per_author
        self._clock = clock
        self._lock = threading.Lock()

    def prior(self, author_id: str, category: str, window_s: float,
              exclude_post: str) -> list[Enforcement]:
        """The author's actions in `category` within the window, other posts only (a
        retry of the same post never counts against its author)."""
        horizon = self._clock() - window_s
        with self._lock:
            recent = self._recent.get(author_id) or ()
            return [e for e in recent if e.category == category and e.at >= horizon
                    and e.post_id != exclude_post]

    def record(self, author_id: str, post_id: str, category: str, action: str) -> None:
        with self._lock:
            recent = self._recent.get(author_id)
            if recent is None:
                recent = self._recent[author_id] = deque(maxlen=self._per_author)
            if any(e.post_id == post_id and e.category == category for e in recent):
                return
            recent.append(Enforcement(post_id, category, action, self._clock()))
