"""Coordinated spam: near-identical text from many accounts within a window.

Why a text fingerprint and not the author memory: a campaign posts the same promo from
many accounts, each once, so no author repeats and the per-author duplicate signal never
fires. Each text becomes a 64-bit SimHash of its word shingles (links, @mentions and
digits normalised away, so per-account tracking links and promo codes do not hide the
copy), and "near-identical" is "within `max_distance` bits" — the same Hamming rule as
the media near-duplicate index (grebe.media.dedup). A post is coordinated when at least
`min_accounts` distinct accounts (itself included) posted such a text in the window; a
lone post, or one account repeating itself, never is.

Bounded (the newest `max_entries` texts) and per engine process, like AuthorMemory: a
campaign spread over several processes is seen per share. The scan is linear over the
window, which at the default bound is microseconds next to a model pass.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from grebe.media.dedup import hamming

_LINK = re.compile(r"(?:https?://|www\.)\S+", re.IGNORECASE)
_MENTION = re.compile(r"@\w+")
_DIGITS = re.compile(r"\d+")
_WORD = re.compile(r"\w+", re.UNICODE)
SHINGLE = 3  # words per shingle
BITS = 64


def fingerprint(text: str) -> int | None:
    """64-bit SimHash of the text's word shingles; None for a text too short to tell a
    campaign from a coincidence (fewer than SHINGLE words: "lol", "thanks!")."""
    clean = _DIGITS.sub("0", _MENTION.sub("@", _LINK.sub("URL", text.lower())))
    tokens = _WORD.findall(clean)
    if len(tokens) < SHINGLE:
        return None
    weights = [0] * BITS
    for i in range(len(tokens) - SHINGLE + 1):
        shingle = " ".join(tokens[i:i + SHINGLE]).encode()
        value = int.from_bytes(hashlib.blake2b(shingle, digest_size=8).digest(), "big")
        for bit in range(BITS):
            weights[bit] += 1 if value >> bit & 1 else -1
    return sum(1 << bit for bit in range(BITS) if weights[bit] > 0)


@dataclass(frozen=True, slots=True)
class Sighting:
    post_id: str
    author_id: str
    print_: int
    at: float


@dataclass(frozen=True, slots=True)
class Campaign:
    """What the index saw: distinct accounts (this one included) and a few post ids."""

    accounts: int
    posts: tuple[str, ...]


class CoordinationIndex:
    """Recent text fingerprints of every account; thread-safe for the engine's workers."""

    def __init__(self, *, max_entries: int, window_s: float, max_distance: int,
                 clock: Callable[[], float] = time.time) -> None:
        self._recent: deque[Sighting] = deque(maxlen=max_entries)
        self._window_s = window_s
        self._max_distance = max_distance
        self._clock = clock
        self._lock = threading.Lock()

    def observe(self, post_id: str, author_id: str, text: str) -> Campaign:
        """Record this post and return the near-identical texts in the window."""
        print_ = fingerprint(text)
        if print_ is None:
            return Campaign(1, (post_id,))
        now = self._clock()
        horizon = now - self._window_s
        with self._lock:
            while self._recent and self._recent[0].at < horizon:
                self._recent.popleft()
            alike = [s for s in self._recent
                     if s.post_id != post_id and hamming(s.print_, print_) <= self._max_distance]
            if not any(s.post_id == post_id for s in self._recent):  # a retry: once
                self._recent.append(Sighting(post_id, author_id, print_, now))
        accounts = {s.author_id for s in alike} | {author_id}
        return Campaign(len(accounts), tuple(s.post_id for s in alike[-5:]))
