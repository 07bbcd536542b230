"""Near-duplicate media across posts: 64-bit perceptual hashes in a BK-tree.

A resized or recompressed copy of a photo keeps nearly the same perceptual hash, so
"near-duplicate" is "within Hamming distance d". A BK-tree answers that exactly,
pruning by the triangle inequality, and is simple enough to trust; multi-index hashing
is the upgrade when the index outgrows memory-resident scans. Video frames are hashed
one by one and share their video's media key.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import imagehash
import numpy as np
from PIL import Image

HashKind = Literal["phash", "dhash"]
_HASHERS = {"phash": imagehash.phash, "dhash": imagehash.dhash}


def perceptual_hash(image: np.ndarray | Image.Image, kind: HashKind = "phash") -> int:
    """A 64-bit perceptual hash of an RGB array or PIL image, as an int."""
    pil = Image.fromarray(image) if isinstance(image, np.ndarray) else image
    bits = _HASHERS[kind](pil, hash_size=8).hash.flatten()
    return int("".join("1" if b else "0" for b in bits), 2)


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()


@dataclass(frozen=True)
class HashEntry:
    post_id: str
    media_key: str  # the media URL (or path): frames of one video share it
    hash: int
    frame: int | None = None  # sample index for video frames


@dataclass(frozen=True)
class Match:
    entry: HashEntry
    distance: int


@dataclass
class _Node:
    hash: int
    entries: list[HashEntry]
    children: dict[int, _Node] = field(default_factory=dict)


class NearDuplicateIndex:
    """A thread-safe BK-tree of perceptual hashes. Operations are microseconds to a few
    milliseconds, so async code may call them directly; the lock guards against
    threads (decode workers) adding while a query walks the tree."""

    def __init__(self) -> None:
        self._root: _Node | None = None
        self._size = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._size

    def add(self, entry: HashEntry) -> None:
        with self._lock:
            self._add(entry)

    def _add(self, entry: HashEntry) -> None:
        self._size += 1
        if self._root is None:
            self._root = _Node(entry.hash, [entry])
            return
        node = self._root
        while True:
            distance = hamming(entry.hash, node.hash)
            if distance == 0:
                node.entries.append(entry)
                return
            child = node.children.get(distance)
            if child is None:
                node.children[distance] = _Node(entry.hash, [entry])
                return
            node = child

    def query(self, hash_value: int, max_distance: int) -> list[Match]:
        """Every entry within `max_distance` bits, nearest first."""
        with self._lock:
            return self._query(hash_value, max_distance)

    def _query(self, hash_value: int, max_distance: int) -> list[Match]:
        found: list[Match] = []
        stack = [self._root] if self._root is not None else []
        while stack:
            node = stack.pop()
            distance = hamming(hash_value, node.hash)
            if distance <= max_distance:
                found.extend(Match(e, distance) for e in node.entries)
            low, high = distance - max_distance, distance + max_distance
            stack.extend(c for d, c in node.children.items() if low <= d <= high)
        found.sort(key=lambda m: (m.distance, m.entry.post_id, m.entry.media_key))
        return found

    def add_and_match(self, entry: HashEntry, max_distance: int) -> list[Match]:
        """Atomically: the near-duplicates of `entry` from other posts, then index it."""
        with self._lock:
            matches = [m for m in self._query(entry.hash, max_distance)
                       if m.entry.post_id != entry.post_id]
            self._add(entry)
            return matches

    def entries(self) -> Iterator[HashEntry]:
        with self._lock:
            stack = [self._root] if self._root is not None else []
            out: list[HashEntry] = []
            while stack:
                node = stack.pop()
                out.extend(node.entries)
                stack.extend(node.children.values())
        return iter(out)

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
