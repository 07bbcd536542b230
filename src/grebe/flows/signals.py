"""Cheap text signals that models miss: links, shouting, repetition, and the same text
posted again and again by one author (a bounded per-author memory of recent texts).

Pure functions plus one small stateful class, so each is unit-testable without models.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from cachetools import LRUCache

_LINK = re.compile(r"(?:https?://|www\.)\S+", re.IGNORECASE)
_WORD = re.compile(r"\w+", re.UNICODE)
_SPACE = re.compile(r"\s+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def count_links(text: str) -> int:
    return len(_LINK.findall(text))


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def shouting(text: str, min_letters: int) -> float:
    """Share of upper-case letters outside links, 0 for texts with too few letters."""
    letters = [c for c in _LINK.sub("", text) if c.isalpha()]
    if len(letters) < min_letters:
        return 0.0
    return sum(c.isupper() for c in letters) / len(letters)


def repetition(text: str, min_tokens: int) -> float:
    """1 - distinct/total tokens: 'buy buy buy buy' -> 0.75; short texts -> 0."""
    tokens = words(text)
    if len(tokens) < min_tokens:
        return 0.0
    return 1.0 - len(set(tokens)) / len(tokens)


def normalize(text: str) -> str:
    """What counts as 'the same text': case, spacing and links ignored."""
    return _SPACE.sub(" ", _LINK.sub("", text.lower())).strip()


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]


@dataclass(frozen=True, slots=True)
class TextSignals:
    links: int
    shouting: float
    repetition: float
    duplicates: int  # earlier copies of this text by the same author within the window


class AuthorMemory:
    """Recent normalised-text digests per author, bounded twice: an LRU over authors and
    a fixed-length deque per author, so memory stays flat whatever the stream does.

    Per process: with several engine processes each sees its share of the stream (the
    local broker and Kafka key by post, so an author's posts may spread); that weakens
    the signal but never breaks a post. Thread-safe for the engine's worker threads."""

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


def text_signals(
    text: str, *, author_id: str, post_id: str, memory: AuthorMemory,
    shouting_min_letters: int, repetition_min_tokens: int,
) -> TextSignals:
    return TextSignals(
        links=count_links(text),
        shouting=shouting(text, shouting_min_letters),
        repetition=repetition(text, repetition_min_tokens),
        duplicates=memory.observe(author_id, post_id, text) if text.strip() else 0,
    )
