"""Serving rows: per author, the newest posts a query can take, side by side in one row.

Why: a query reads ~1,000 followed authors. Going through each author's object, its
lists and their timestamp arrays cost ~10 scattered memory reads per author, most of a
query (docs/benchmarks.md, "Thunder"). Here every author has an int slot, and a table
holds one row per slot: the creation times of its newest `serve_*_per_author` posts of
each kind (oldest -> newest, right-aligned, -inf where it has fewer; `HEADROOM` times
the cap, for excluded posts), with their records and post id hashes at the same places
in parallel arrays. A query fancy-indexes its authors' rows
(one read each) and reads only the records it returns.

The rows are a copy of the tails of each author's lists (`records.AuthorPosts`, still
the truth for writes, deletes, trims and excluded posts): the store calls `refresh`
after every change to an author's lists, `add` for a new author and `drop` when one
is removed. Two tables: originals + replies/retweets (16 places a row with the default
caps: 128 bytes of times), and videos. Memory: 25 bytes a place, ~550 bytes an author
with the defaults (~60 MB for 100k authors; bench/thunder.py prints it).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from operator import attrgetter

import numpy as np

from grebe.thunder.records import AuthorPosts, LightPost
from grebe.thunder.settings import ThunderSettings

NONE = float("-inf")  # the time of an empty place in a row: never served
#: Places per kind in a row, as a multiple of the kind's serving cap: room for the
#: newest k after excluded ("seen") posts among the newest are skipped, without going
#: back to the author's lists (query.py does that only for a row with more holes).
HEADROOM = 2
_post_id = attrgetter("post_id")


class ServingTable:
    """Rows of `width` places per slot, place `slot * width + offset + i`: `times` (a
    flat `array('d')`), `records` (a flat list) and `hashes` (of the records' post ids,
    `array('q')`: a query matches excluded ids against them in numpy, reading no
    record). `parts` are the kinds in a row: (list attribute, offset, k, places).

    Each kind's places are a ring: `heads[slot * len(parts) + part]` is the place of
    its oldest post, so a new newest post overwrites one place
    (`ServingRows.appended`) instead of moving the others, which would touch every
    record's reference count; `rows` gives the rows in order, oldest -> newest."""

    __slots__ = ("_pad_hashes", "_pad_records", "_pad_times", "hashes", "heads", "parts",
                 "records", "times", "width")

    def __init__(self, parts: list[tuple[str, int]]) -> None:
        self.parts: list[tuple[str, int, int, int]] = []
        offset = 0
        for attr, k in parts:
            if k:  # a kind served 0 per author has no places
                self.parts.append((attr, offset, k, k * HEADROOM))
                offset += k * HEADROOM
        self.width = offset
        self.times = array("d")
        self.hashes = array("q")
        self.heads = array("q")
        self.records: list[LightPost | None] = []
        self._pad_times = array("d", [NONE] * offset)
        self._pad_hashes = array("q", [0] * offset)
        self._pad_records: list[LightPost | None] = [None] * offset

    def grow(self, slots: int) -> None:
        """Make room for `slots` slots (rows never shrink: freed slots are reused)."""
        missing = slots - len(self.heads) // max(1, len(self.parts))
        if missing > 0:
            self.times.extend(array("d", [NONE]) * (missing * self.width))
            self.hashes.extend(array("q", [0]) * (missing * self.width))
            self.records.extend([None] * (missing * self.width))
            self.heads.extend(array("q", [0]) * (missing * len(self.parts)))

    def rows(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The times and places (indices into `records` and `hashes`) of these slots'
        rows, shape (len(slots), width), each kind's places oldest -> newest."""
        times = np.frombuffer(self.times, dtype=np.float64).reshape(-1, self.width)[slots]
        heads = np.frombuffer(self.heads, dtype=np.int64).reshape(-1, len(self.parts))[slots]
        cols = np.empty(times.shape, dtype=np.intp)
        for j, (_, o, _, w) in enumerate(self.parts):
            cols[:, o : o + w] = o + (heads[:, j : j + 1] + np.arange(w)) % w
        # The numpy views above end here: `times` may grow again once they are gone.
        return (np.take_along_axis(times, cols, axis=1),
                slots[:, None] * self.width + cols)

    def hashes_at(self, places: np.ndarray) -> np.ndarray:
        return np.frombuffer(self.hashes, dtype=np.int64)[places]

    def write(self, slot: int, part: int, posts: list[LightPost],
              times: array[float]) -> None:
        """Copy the newest places of `posts` (and their `times`) into the row's kind
        `part`, in order (its head back at its first place)."""
        _, offset, _, places = self.parts[part]
        at = slot * self.width + offset
        n = len(times)
        self.heads[slot * len(self.parts) + part] = 0
        if n >= places:
            newest = posts[n - places :]
            self.times[at : at + places] = times[n - places :]
            self.records[at : at + places] = newest
            self.hashes[at : at + places] = array("q", map(hash, map(_post_id, newest)))
        else:
            pad = places - n
            self.times[at : at + places] = self._pad_times[:pad] + times
            self.records[at : at + places] = [*self._pad_records[:pad], *posts]
            self.hashes[at : at + places] = self._pad_hashes[:pad] + array(
                "q", map(hash, map(_post_id, posts)))

    def clear(self, slot: int) -> None:
        at = slot * self.width
        self.times[at : at + self.width] = self._pad_times
        self.hashes[at : at + self.width] = self._pad_hashes
        self.records[at : at + self.width] = self._pad_records  # let the records go
        for part in range(len(self.parts)):
            self.heads[slot * len(self.parts) + part] = 0


class SlotIndex:
    """Author id -> slot, looked up for a whole following list at once in numpy.

    Why: 1,000 `dict.get`s of fresh request strings cost ~0.7 ms on a loaded box (each
    a dependent chain of cache misses: the index, the entry, the stored key string),
    more than the rest of a query. Here the keys are the ids' 64-bit string hashes in
    an open-addressing table (linear probing, at most half full) and the probes of all
    the ids run together in numpy, so their memory reads overlap.

    The ids themselves are not compared: an id not held whose hash equals a held
    author's would read that author's posts. Python's string hashes are 64-bit and
    randomised per process (SipHash), so the odds are ~authors / 2^64 per lookup.
    Two held authors with the same hash are resolved through `slot_of`."""

    EMPTY = 0  # a free place; a hash of 0 is stored as 1 (see `_keys`)
    GONE = -1  # a removed key (probes go on past it); Python never hashes to -1

    def __init__(self, slot_of: dict[str, int]) -> None:
        self.slot_of = slot_of  # the same mapping, as a dict: the truth
        self.keys = np.zeros(1024, dtype=np.int64)
        self.slots = np.full(1024, -1, dtype=np.intp)
        self.used = 0  # keys and GONE places
        self.shared: set[int] = set()  # hashes held by two authors (see class doc)

    @staticmethod
    def _keys(ids: Sequence[str]) -> np.ndarray:
        keys = np.fromiter(map(hash, ids), dtype=np.int64, count=len(ids))
        keys[keys == SlotIndex.EMPTY] = 1
        return keys

    def _probe(self, keys: np.ndarray) -> np.ndarray:
        """The place of each key in `self.keys`, or -1."""
        table = self.keys
        mask = len(table) - 1
        at = keys & mask
        found = np.full(len(keys), -1, dtype=np.intp)
        todo = np.arange(len(keys))
        while len(todo):
            held = table[at[todo]]
            hit = held == keys[todo]
            found[todo[hit]] = at[todo[hit]]
            todo = todo[~hit & (held != self.EMPTY)]  # go on past others and GONE
            at[todo] = (at[todo] + 1) & mask
        return found

    def lookup(self, ids: Sequence[str]) -> np.ndarray:
        """The slot of each id, -1 for an author not held."""
        keys = self._keys(ids)
        at = self._probe(keys)
        out = np.where(at >= 0, self.slots[at], -1)
        if self.shared:
            for i in np.flatnonzero(np.isin(keys, list(self.shared))).tolist():
                out[i] = self.slot_of.get(ids[i], -1)
        return out

    def add(self, author_id: str, slot: int) -> None:
        if 2 * (self.used + 1) > len(self.keys):
            self._rebuild()
        key = hash(author_id) or 1  # as `_keys`; Python ints: no numpy scalars here
        item, mask = self.keys.item, len(self.keys) - 1
        at = key & mask
        held = item(at)
        while held != self.EMPTY and held != self.GONE:
            if held == key:
                self.shared.add(key)
            at = (at + 1) & mask
            held = item(at)
        if held == self.EMPTY:
            self.used += 1
        self.keys[at] = key
        self.slots[at] = slot

    def remove(self, author_id: str, slot: int) -> None:
        key = hash(author_id) or 1
        item, mask = self.keys.item, len(self.keys) - 1
        at = key & mask
        while (held := item(at)) != self.EMPTY:
            if held == key and self.slots.item(at) == slot:
                self.keys[at] = self.GONE
                self.slots[at] = -1
                return
            at = (at + 1) & mask

    def _rebuild(self) -> None:
        """A table four times the authors held (so at most a quarter full), filled in
        numpy: each round places the keys whose place is free, the first of any that
        want the same place; the others move on one place."""
        size = 1024
        while size < 4 * (len(self.slot_of) + 1):
            size *= 2
        ids = list(self.slot_of)
        keys = self._keys(ids)
        slots = np.fromiter(self.slot_of.values(), dtype=np.intp, count=len(ids))
        table = np.zeros(size, dtype=np.int64)
        values = np.full(size, -1, dtype=np.intp)
        at = keys & (size - 1)
        todo = np.arange(len(keys))
        done = np.zeros(len(keys), dtype=bool)
        while len(todo):
            free = todo[table[at[todo]] == self.EMPTY]
            placed = free[np.unique(at[free], return_index=True)[1]]
            table[at[placed]] = keys[placed]
            values[at[placed]] = slots[placed]
            done[placed] = True
            todo = todo[~done[todo]]
            at[todo] = (at[todo] + 1) & (size - 1)
        self.keys, self.slots, self.used = table, values, len(ids)
        unique, counts = np.unique(keys, return_counts=True)
        self.shared = set(unique[counts > 1].tolist())


class ServingRows:
    """Author slots and the two serving tables; see the module docstring."""

    def __init__(self, settings: ThunderSettings) -> None:
        s = settings
        self.main = ServingTable([("originals", s.serve_originals_per_author),
                                  ("secondary", s.serve_secondary_per_author)])
        self.videos = ServingTable([("videos", s.serve_videos_per_author)])
        self.slot_of: dict[str, int] = {}
        self.index = SlotIndex(self.slot_of)
        self.owners: list[AuthorPosts | None] = []  # slot -> its author's lists
        self._free: list[int] = []
        #: Bumped when a slot is freed (and may then be given to another author): a
        #: query that looked slots up across yields looks them up again.
        self.generation = 0
        # list attribute -> (table, part, places, timestamps attribute, and for
        # `appended`: the table's times, records, hashes, heads, parts and width, and
        # the part's offset).
        self._places = {
            attr: (table, part, places, f"{attr}_ts", table.times, table.records,
                   table.hashes, table.heads, len(table.parts), table.width, offset)
            for table in (self.main, self.videos)
            for part, (attr, offset, _, places) in enumerate(table.parts)}

    def add(self, posts: AuthorPosts) -> None:
        """Give a new author a slot (its rows are empty)."""
        if self._free:
            slot = self._free.pop()
            self.owners[slot] = posts
        else:
            slot = len(self.owners)
            self.owners.append(posts)
            if slot * self.main.width >= len(self.main.records) or (
                    slot * self.videos.width >= len(self.videos.records)):
                grown = slot + max(1024, slot // 8)  # amortised, ~12% slack
                self.main.grow(grown)
                self.videos.grow(grown)
        posts.slot = slot
        self.index.add(posts.author_id, slot)  # first: it may rebuild from `slot_of`
        self.slot_of[posts.author_id] = slot

    def drop(self, posts: AuthorPosts) -> None:
        """Free a removed author's slot and empty its rows."""
        del self.slot_of[posts.author_id]
        self.index.remove(posts.author_id, posts.slot)
        self.main.clear(posts.slot)
        self.videos.clear(posts.slot)
        self.owners[posts.slot] = None
        self._free.append(posts.slot)
        self.generation += 1

    def refresh(self, posts: AuthorPosts, attr: str) -> None:
        """Copy the tail of `posts`' list `attr` ("originals", "secondary", "videos")
        into its row after that list changed."""
        place = self._places.get(attr)
        if place is not None:
            table, part, _, ts_attr = place[:4]
            table.write(posts.slot, part, getattr(posts, attr), getattr(posts, ts_attr))

    def appended(self, posts: AuthorPosts, attr: str, post: LightPost,
                 evicted: bool) -> None:
        """`post` was appended to `posts`' list `attr` as its newest (and the list's
        oldest evicted when `evicted`): one place written (`ServingTable.append`,
        inlined: this runs for nearly every create), unless the eviction was within
        the row's places."""
        place = self._places.get(attr)
        if place is None:
            return
        table, part, places, ts_attr, times, records, hashes, heads, parts, width, offset = (
            place)
        if evicted and len(getattr(posts, attr)) < places:
            table.write(posts.slot, part, getattr(posts, attr), getattr(posts, ts_attr))
            return
        slot = posts.slot
        head_at = slot * parts + part
        head = heads[head_at]
        at = slot * width + offset + head
        times[at] = post.created_at
        records[at] = post
        hashes[at] = hash(post.post_id)
        heads[head_at] = head + 1 if head + 1 < places else 0

    def memory_bytes(self) -> int:
        """The tables' buffers, the slot dict and index (25 bytes a place, plus ~150
        bytes an author; the author id strings are the store's)."""
        tables = sum(len(t.times) * 8 + len(t.hashes) * 8 + len(t.records) * 8
                     + len(t.heads) for t in (self.main, self.videos))
        return (tables + sys.getsizeof(self.slot_of) + sys.getsizeof(self.owners)
                + sys.getsizeof(self._free) + self.index.keys.nbytes
                + self.index.slots.nbytes)
