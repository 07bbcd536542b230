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
    """Rows of `width` places per slot. A slot's cells (`cells`, a flat `array('d')`,
    `stride` a slot) are its kinds' ring heads, then for each place its post's time
    and its post id's hash (as a double: a query matches excluded ids against them in
    numpy, reading only a match's record), side by side so that writing a post
    touches one stretch of memory; the records are in `records` (a flat list, place
    `slot * width + offset + i`). `parts` are the kinds in a row: (list attribute,
    offset, k, places).

    Each kind's places are a ring: its head is the place of its oldest post, so a new
    newest post overwrites one place (`ServingRows.appended`) instead of moving the
    others, which would touch every record's reference count; `rows` gives the rows
    in order, oldest -> newest."""

    __slots__ = ("_empty_cells", "_pad_records", "cells", "parts", "records", "stride",
                 "width")

    def __init__(self, parts: list[tuple[str, int]]) -> None:
        self.parts: list[tuple[str, int, int, int]] = []
        offset = 0
        for attr, k in parts:
            if k:  # a kind served 0 per author has no places
                self.parts.append((attr, offset, k, k * HEADROOM))
                offset += k * HEADROOM
        self.width = offset
        self.stride = len(self.parts) + 2 * offset
        self.cells = array("d")
        self.records: list[LightPost | None] = []
        self._empty_cells = array("d", [0.0] * len(self.parts) + [NONE, 0.0] * offset)
        self._pad_records: list[LightPost | None] = [None] * offset

    def grow(self, slots: int) -> None:
        """Make room for `slots` slots (rows never shrink: freed slots are reused)."""
        missing = slots - len(self.cells) // max(1, self.stride)
        if missing > 0 and self.width:
            self.cells.extend(self._empty_cells * missing)
            self.records.extend([None] * (missing * self.width))

    def rows(self, slots: np.ndarray, hashes: bool = False
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """The times, places (indices into `records`) and, when asked, post id hashes
        of these slots' rows, shape (len(slots), width), each kind oldest -> newest."""
        cells = np.frombuffer(self.cells, dtype=np.float64).reshape(-1, self.stride)[slots]
        # The view ends here: `cells` may grow again once the query is done.
        n = len(self.parts)
        heads = cells[:, :n].astype(np.intp)
        cols = np.empty((len(slots), self.width), dtype=np.intp)
        for j, (_, o, _, w) in enumerate(self.parts):
            cols[:, o : o + w] = o + (heads[:, j : j + 1] + np.arange(w)) % w
        return (np.take_along_axis(cells[:, n::2], cols, axis=1),
                slots[:, None] * self.width + cols,
                np.take_along_axis(cells[:, n + 1 :: 2], cols, axis=1) if hashes else None)

    def write(self, slot: int, part: int, posts: list[LightPost],
              times: array[float]) -> None:
        """Copy the newest places of `posts` (and their `times`) into the row's kind
        `part`, in order (its head back at its first place)."""
        _, offset, _, places = self.parts[part]
        base = slot * self.stride
        n = min(len(times), places)
        newest = posts[len(posts) - n :]
        cells = [NONE, 0.0] * (places - n)
        for created, post in zip(times[len(times) - n :], newest, strict=True):
            cells += (created, float(hash(post.post_id)))
        self.cells[base + part] = 0.0
        at = base + len(self.parts) + 2 * offset
        self.cells[at : at + 2 * places] = array("d", cells)
        at = slot * self.width + offset
        self.records[at : at + places] = [*self._pad_records[: places - n], *newest]

    def clear(self, slot: int) -> None:
        self.cells[slot * self.stride : (slot + 1) * self.stride] = self._empty_cells
        at = slot * self.width
        self.records[at : at + self.width] = self._pad_records  # let the records go


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
        self._pending: dict[str, int] = {}  # added since the last lookup

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
        if self._pending:
            self._flush()
        keys = self._keys(ids)
        at = self._probe(keys)
        out = np.where(at >= 0, self.slots[at], -1)
        if self.shared:
            for i in np.flatnonzero(np.isin(keys, list(self.shared))).tolist():
                out[i] = self.slot_of.get(ids[i], -1)
        return out

    def add(self, author_id: str, slot: int) -> None:
        """Noted now, put in the table by the next lookup, with the others added
        meanwhile, in numpy: one by one cost ~4 us an author (ingest adds thousands)."""
        self._pending[author_id] = slot

    def remove(self, author_id: str, slot: int) -> None:
        if self._pending.pop(author_id, None) is not None:
            return
        key = hash(author_id) or 1  # as `_keys`; Python ints: no numpy scalars here
        item, mask = self.keys.item, len(self.keys) - 1
        at = key & mask
        while (held := item(at)) != self.EMPTY:
            if held == key and self.slots.item(at) == slot:
                self.keys[at] = self.GONE
                self.slots[at] = -1
                return
            at = (at + 1) & mask

    def _flush(self) -> None:
        """Put the authors added since the last lookup in the table (rebuilt from
        `slot_of`, which holds them too, when it would be more than half full)."""
        pending, self._pending = self._pending, {}
        if 2 * (self.used + len(pending)) > len(self.keys):
            self._rebuild()
            return
        keys = self._keys(list(pending))
        slots = np.fromiter(pending.values(), dtype=np.intp, count=len(keys))
        unique, counts = np.unique(keys, return_counts=True)
        self.shared.update(unique[counts > 1].tolist())
        self.shared.update(keys[self._probe(keys) >= 0].tolist())
        self._place(self.keys, self.slots, keys, slots)
        self.used += len(keys)

    def _place(self, table: np.ndarray, values: np.ndarray, keys: np.ndarray,
               slots: np.ndarray) -> None:
        """Put `keys` (-> `slots`) in the free places of `table`, in numpy: each round
        places the keys whose place is free, the first of any that want the same
        place; the others move on one place."""
        mask = len(table) - 1
        at = keys & mask
        todo = np.arange(len(keys))
        done = np.zeros(len(keys), dtype=bool)
        while len(todo):
            free = todo[table[at[todo]] == self.EMPTY]
            placed = free[np.unique(at[free], return_index=True)[1]]
            table[at[placed]] = keys[placed]
            values[at[placed]] = slots[placed]
            done[placed] = True
            todo = todo[~done[todo]]
            at[todo] = (at[todo] + 1) & mask

    def _rebuild(self) -> None:
        """A table four times the authors held (so at most a quarter full)."""
        size = 1024
        while size < 4 * (len(self.slot_of) + 1):
            size *= 2
        keys = self._keys(list(self.slot_of))
        slots = np.fromiter(self.slot_of.values(), dtype=np.intp, count=len(keys))
        self.keys = np.zeros(size, dtype=np.int64)
        self.slots = np.full(size, -1, dtype=np.intp)
        self._place(self.keys, self.slots, keys, slots)
        self.used = len(keys)
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
        # `appended`: the table's cells, records, stride and width, and the part's
        # offset and first cell in a row).
        self._places = {
            attr: (table, part, places, f"{attr}_ts", table.cells, table.records,
                   table.stride, table.width, offset, len(table.parts) + 2 * offset)
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
            if (slot + 1) * self.main.stride > len(self.main.cells) or (
                    (slot + 1) * self.videos.stride > len(self.videos.cells)):
                grown = slot + max(1024, slot // 8)  # amortised, ~12% slack
                self.main.grow(grown)
                self.videos.grow(grown)
        posts.slot = slot
        self.slot_of[posts.author_id] = slot
        self.index.add(posts.author_id, slot)

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
        table, part, places, ts_attr, cells, records, stride, width, offset, first = place
        if evicted and len(getattr(posts, attr)) < places:
            table.write(posts.slot, part, getattr(posts, attr), getattr(posts, ts_attr))
            return
        slot = posts.slot
        base = slot * stride
        head = int(cells[base + part])
        at = base + first + 2 * head
        cells[at] = post.created_at
        cells[at + 1] = float(hash(post.post_id))
        records[slot * width + offset + head] = post
        cells[base + part] = head + 1 if head + 1 < places else 0

    def memory_bytes(self) -> int:
        """The tables' buffers, the slot dict and index (25 bytes a place, plus ~150
        bytes an author; the author id strings are the store's)."""
        tables = sum(len(t.cells) * 8 + len(t.records) * 8 for t in (self.main, self.videos))
        return (tables + sys.getsizeof(self.slot_of) + sys.getsizeof(self.owners)
                + sys.getsizeof(self._free) + self.index.keys.nbytes
                + self.index.slots.nbytes)
