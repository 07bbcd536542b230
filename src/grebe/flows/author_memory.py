"""A bounded per-author memory of recent texts: the duplicate-text spam signal (the same
text posted again and again by one author) needs to remember what each author posted.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import deque
from collections.abc import Callable

from cachetools import LRUCache

from grebe.flows.text_signals import normalize


class AuthorMemory:
    """Recent normalised-text digests per author, bounded twice: an LRU over authors and
    a fixed-length deque per author, so memory stays flat whatever the stream does.

    Per process, and whole: the dispatcher sends every post of an author to the same
    engine (grebe.core.engine), so no other engine needs to know. Only while that engine
    restarts do its authors' posts go to another, whose memory of them starts empty, as
    a lone engine's does after a restart. Thread-safe for the engine's worker threads."""

    def __init__(
        self, *, authors: int, texts_per_author: int, window_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._recent: LRUCache[str, deque[tuple[bytes, str, float]]] = LRUCache(maxsize=authors)
        self._per_author = texts_per_author
        self._window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()

    def observe(self, author_id: str, post_id: str, text: str) -> int:
        """Record this post and return how many OTHER recent posts of the author had the
        same text. Seeing the same post id again (a retry) does not count it twice."""
        digest = hashlib.blake2b(normalize(text).encode(), digest_size=12).digest()
        now = self._clock()
        with self._lock:
            recent = self._recent.get(author_id)
            if recent is None:
                recent = deque(maxlen=self._per_author)
                self._recent[author_id] = recent
            horizon = now - self._window_s
            copies = sum(1 for d, pid, ts in recent if d == digest and pid != post_id
                         and ts >= horizon)
            if not any(pid == post_id for _, pid, _ in recent):
                recent.append((digest, post_id, now))
            return copies
