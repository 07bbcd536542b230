"""Near-duplicate media across posts: 64-bit perceptual hashes in a bounded ring.

A resized or recompressed copy of a photo keeps nearly the same perceptual hash, so
"near-duplicate" is "within Hamming distance d". The index answers that exactly with a
vectorised scan (XOR and popcount over a numpy array of the hashes). It began as a
BK-tree, but at d = 10 of 64 bits a BK-tree prunes almost nothing on perceptual hashes
of unrelated media: 1,000 videos (8,000 frame hashes) made each query ~5 ms of Python,
growing linearly, and the tree kept every hash for the life of an engine. The scan is
~100x cheaper per entry, and the ring keeps the most recent `max_entries` hashes only
(the oldest are overwritten), so memory and query cost are bounded however long it runs.
Video frames are hashed one by one and share their video's media key.

Each engine process holds one index; with several engines each publishes what it adds to
the others (`share_with`, grebe.core.peers), so a copy posted through another engine is
still found. PIL and imagehash are imported by `perceptual_hash` only: a text-only engine
builds the (empty) index at start to receive the others' entries, and never hashes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from grebe.core.peers import Peers
from grebe.media.config import DEFAULT_DEDUP_MAX_ENTRIES

if TYPE_CHECKING:
    from collections.abc import Callable

    from PIL import Image

HashKind = Literal["phash", "dhash"]
PEER_CHANNEL = "media.near_duplicates"
_Shared = tuple[str, str, int, int | None]  # HashEntry's fields, in order
_INITIAL_SLOTS = 1024  # the ring's arrays start small and double up to max_entries
DEFAULT_MAX_ENTRIES = DEFAULT_DEDUP_MAX_ENTRIES


def perceptual_hash(image: np.ndarray | Image.Image, kind: HashKind = "phash") -> int:
    """A 64-bit perceptual hash of an RGB array or PIL image, as an int."""
    import imagehash
    from PIL import Image

    pil = Image.fromarray(image) if isinstance(image, np.ndarray) else image
    hasher = imagehash.phash if kind == "phash" else imagehash.dhash
    bits = hasher(pil, hash_size=8).hash.flatten()
    return int("".join("1" if b else "0" for b in bits), 2)


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()


@dataclass(frozen=True, slots=True)
class HashEntry:
    post_id: str
    media_key: str  # the media URL (or path): frames of one video share it
    hash: int
    frame: int | None = None  # sample index for video frames


@dataclass(frozen=True, slots=True)
class Match:
    entry: HashEntry
    distance: int


class NearDuplicateIndex:
    """A thread-safe ring of the most recent `max_entries` perceptual hashes. A query is
    one numpy pass (~0.15 ms at 200,000 entries), so async code may call
    it directly; the lock guards against threads adding while a query reads the ring."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self.max_entries = max_entries
        self._hashes = np.zeros(min(max_entries, _INITIAL_SLOTS), dtype=np.uint64)
        self._entries: list[HashEntry] = []  # slot i holds the entry of _hashes[i]
        self._added = 0  # ever added: the next slot is _added % max_entries
        self._lock = threading.Lock()
        self._publish: Callable[[_Shared], None] | None = None

    def share_with(self, peers: Peers) -> None:
        """Send each entry this engine adds to the other engines, add theirs."""
        self._publish = peers.channel(PEER_CHANNEL, self._merge, _Shared)

    def _merge(self, shared: _Shared) -> None:
        with self._lock:
            self._add(HashEntry(*shared))

    def _shared(self, entry: HashEntry) -> None:
        if self._publish is not None:
            self._publish((entry.post_id, entry.media_key, entry.hash, entry.frame))

    def __len__(self) -> int:
        return min(self._added, self.max_entries)

    def add(self, entry: HashEntry) -> None:
        with self._lock:
            self._add(entry)
        self._shared(entry)

    def _add(self, entry: HashEntry) -> None:
        slot = self._added % self.max_entries
        if slot == len(self._hashes):  # still filling: grow geometrically, up to the cap
            grown = np.zeros(min(self.max_entries, 2 * len(self._hashes)), dtype=np.uint64)
            grown[:slot] = self._hashes
            self._hashes = grown
        self._hashes[slot] = entry.hash
        if slot == len(self._entries):
            self._entries.append(entry)
        else:  # the ring is full: the oldest entry makes room
            self._entries[slot] = entry
        self._added += 1

    def query(self, hash_value: int, max_distance: int) -> list[Match]:
        """Every entry within `max_distance` bits, nearest first."""
        with self._lock:
            return self._query(hash_value, max_distance)

    def _query(self, hash_value: int, max_distance: int) -> list[Match]:
        distances = np.bitwise_count(self._hashes[: len(self)] ^ np.uint64(hash_value))
        near = np.flatnonzero(distances <= max_distance)
        found = [Match(self._entries[i], int(distances[i])) for i in near]
        found.sort(key=lambda m: (m.distance, m.entry.post_id, m.entry.media_key))
        return found

    def add_and_match(self, entry: HashEntry, max_distance: int) -> list[Match]:
        """Atomically: the near-duplicates of `entry` from other posts, then index it."""
        with self._lock:
            matches = [m for m in self._query(entry.hash, max_distance)
                       if m.entry.post_id != entry.post_id]
            self._add(entry)
        self._shared(entry)
        return matches

    def entries(self) -> Iterator[HashEntry]:
        with self._lock:
            return iter(list(self._entries))

    def groups(self, max_distance: int) -> list[list[str]]:
        """Media keys connected by near-duplicate hashes (transitively), largest first;
        only groups of two or more distinct media."""
        parent: dict[str, str] = {}

        def find(key: str) -> str:
            parent.setdefault(key, key)
            while parent[key] != key:
                parent[key] = parent[parent[key]]
                key = parent[key]
            return key

        for entry in self.entries():
            find(entry.media_key)
            for match in self.query(entry.hash, max_distance):
                a, b = find(entry.media_key), find(match.entry.media_key)
                if a != b:
                    parent[a] = b
        clusters: dict[str, list[str]] = {}
        for key in parent:
            clusters.setdefault(find(key), []).append(key)
        found = [sorted(keys) for keys in clusters.values() if len(keys) > 1]
        return sorted(found, key=lambda keys: (-len(keys), keys))
