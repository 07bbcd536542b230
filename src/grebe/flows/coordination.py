"""Coordinated spam: near-identical text from many accounts within a window.

Why a text fingerprint and not the author memory: a campaign posts the same promo from
many accounts, each once, so no author repeats and the per-author duplicate signal never
fires. Each text becomes a 64-bit SimHash of its word shingles (links, @mentions and
digits normalised away, so per-account tracking links and promo codes do not hide the
copy), and "near-identical" is "within `max_distance` bits" — the Hamming rule of the
media near-duplicate index (grebe.media.dedup), here over a flat array rather than a
BK-tree, since texts leave the window and a tree does not delete cheaply. A post is
coordinated when at least `min_accounts` distinct accounts (itself included) posted
such a text in the window; a lone post, or one account repeating itself, never is.

Bounded (the newest `max_entries` texts). Each engine process holds one; with several
engines each publishes what it records to the others (`share_with`, grebe.core.peers),
so every index holds the whole stream's texts, one IPC hop late. Every query compares
against the whole buffer at once (vectorised), which is cheap next to a model pass.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from grebe.core.peers import Peers

_LINK = re.compile(r"(?:https?://|www\.)\S+", re.IGNORECASE)
_MENTION = re.compile(r"@\w+")
_DIGITS = re.compile(r"\d+")
_WORD = re.compile(r"\w+", re.UNICODE)
SHINGLE = 3  # words per shingle
PLAIN_WORDS = 8  # the fewest words a text without a link needs to count as a copy
_LINK_TOKEN = "URL"  # what a link becomes (upper case: the text is lower-cased first)
BITS = 64
PEER_CHANNEL = "spam.coordination"
_Shared = tuple[int, float, str, str]  # (fingerprint, at, author id, post id)


def fingerprint(text: str) -> int | None:
    """64-bit SimHash of the text's word shingles; None for a text too short to tell a
    campaign from a coincidence: fewer than SHINGLE words ("lol", "thanks!"), or fewer
    than PLAIN_WORDS without a link. Many people reply "yes she is" or "happy birthday
    captain!" within an hour by chance (seven accounts did in 1,984 real tweets, which
    flagged three as coordinated spam and their authors with them); a campaign's copy
    carries its payload, a link, or is long enough that chance does not repeat it."""
    clean = _DIGITS.sub("0", _MENTION.sub("@", _LINK.sub(_LINK_TOKEN, text.lower())))
    tokens = _WORD.findall(clean)
    if len(tokens) < SHINGLE or (len(tokens) < PLAIN_WORDS and _LINK_TOKEN not in tokens):
        return None
    digests = b"".join(hashlib.blake2b(" ".join(tokens[i:i + SHINGLE]).encode(),
                                       digest_size=8).digest()
                       for i in range(len(tokens) - SHINGLE + 1))
    bits = np.unpackbits(np.frombuffer(digests, dtype=np.uint8).reshape(-1, 8), axis=1)
    votes = bits.sum(axis=0) * 2 > bits.shape[0]  # majority per bit position
    return int.from_bytes(np.packbits(votes).tobytes(), "big")


@dataclass(frozen=True, slots=True)
class Campaign:
    """What the index saw: distinct accounts (this one included) and a few post ids."""

    accounts: int
    posts: tuple[str, ...]


class CoordinationIndex:
    """Recent text fingerprints of every account in a ring buffer, compared all at once
    (numpy XOR + popcount: 0.15 ms a post at 20,000 texts, fingerprint included, where a
    Python loop took 7.6 ms);
    thread-safe for the engine's workers."""

    def __init__(self, *, max_entries: int, window_s: float, max_distance: int,
                 clock: Callable[[], float] = time.time) -> None:
        self._prints = np.zeros(max_entries, dtype=np.uint64)
        self._at = np.full(max_entries, -np.inf)  # -inf: an empty slot
        self._authors: list[str] = [""] * max_entries
        self._posts: list[str] = [""] * max_entries
        self._next = 0
        self._window_s = window_s
        self._max_distance = max_distance
        self._clock = clock
        self._lock = threading.Lock()
        self._publish: Callable[[_Shared], None] | None = None

    def share_with(self, peers: Peers) -> None:
        """Send each text this engine records to the other engines, record theirs."""
        self._publish = peers.channel(PEER_CHANNEL, self._merge, _Shared)

    def _merge(self, shared: _Shared) -> None:
        print_, at, author_id, post_id = shared
        with self._lock:
            self._record(print_, at, author_id, post_id)

    def _record(self, print_: int, at: float, author_id: str, post_id: str) -> None:
        slot = self._next
        self._prints[slot], self._at[slot] = print_, at
        self._authors[slot], self._posts[slot] = author_id, post_id
        self._next = (slot + 1) % len(self._at)

    def observe(self, post_id: str, author_id: str, text: str) -> Campaign:
        """Record this post and return the near-identical texts in the window."""
        print_ = fingerprint(text)
        if print_ is None:
            return Campaign(1, (post_id,))
        now = self._clock()
        with self._lock:
            near = np.bitwise_count(self._prints ^ np.uint64(print_)) <= self._max_distance
            hits = np.flatnonzero(near & (self._at >= now - self._window_s))
            alike = [int(i) for i in hits[np.argsort(self._at[hits], kind="stable")]
                     if self._posts[i] != post_id]
            # Read the matches before writing: the slot written may be one of them.
            campaign = Campaign(len({self._authors[i] for i in alike} | {author_id}),
                                tuple(self._posts[i] for i in alike[-5:]))
            recorded = len(alike) == len(hits)  # not a retry of a post already recorded
            if recorded:
                self._record(print_, now, author_id, post_id)
        if recorded and self._publish is not None:
            self._publish((print_, now, author_id, post_id))
        return campaign
