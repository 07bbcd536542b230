"""A result remembered for the newest objects, by identity.

Why: some per-post work is asked for several times about the very same object (an
annotation's embedding list is packed to int8 by the sink, the output topic and the
store; a post is fingerprinted once per plan's annotation; a plan's threshold overrides
are turned into a memo key several times a post). Hashing or comparing the object's
contents would cost what the cache saves, so entries are found by `id()`. An entry holds
the object itself, so its id cannot be reused while the entry lives; for mutable objects
a `snapshot` (a copy) is kept as well and must still equal the object, so one changed in
place is computed again. At most `size` entries, the oldest dropped first.

Thread-safe enough for a cache: a lookup and an insert are single dict operations under
the GIL; two threads evicting at once may drop one entry too many, never return a wrong
value.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class IdentityCache(Generic[K, V]):
    def __init__(self, size: int, snapshot: Callable[[K], Any] | None = None) -> None:
        self._size = size
        self._snapshot = snapshot
        self._items: dict[int, tuple[K, Any, V]] = {}

    def __len__(self) -> int:
        return len(self._items)

    def get(self, obj: K, compute: Callable[[K], V]) -> V:
        """compute(obj), or what it gave for this same (and, with a snapshot, unchanged)
        object lately."""
        known = self._items.get(id(obj))
        if known is not None and known[0] is obj and (
                self._snapshot is None or known[1] == obj):
            return known[2]
        value = compute(obj)
        if len(self._items) >= self._size:
            # the oldest; another thread may be evicting at the same moment
            with contextlib.suppress(RuntimeError, StopIteration):
                self._items.pop(next(iter(self._items)), None)
        self._items[id(obj)] = (obj, self._snapshot(obj) if self._snapshot else None, value)
        return value
