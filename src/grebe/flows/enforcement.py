"""Enforcement history: what the policy step did to an author before, per category.

Why: a policy that treats the tenth harassment post like the first is easy to game; the
PTOS policy step reads this history and gives a repeat offender (`escalate_after` prior
actions in the category within the window) the category's strictest action.

Where: in the annotation store, one row per author (producer `record.enforcement`
under `user:<author id>`, the key the sink's user records use), so the history survives
a restart and is shared by every engine process on a shared store (SQLite, PostgreSQL).
Each entry is a score `"<category>|<action>|<post id>"` -> epoch seconds; a row keeps
only the newest `entries_per_author` entries inside the window (bounded). Two processes
recording the same author at the same instant may lose one entry: the history then
errs milder, never stricter than the posts call for.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from grebe.stores.base import AnnotationStore
from grebe.types import Annotation

ENFORCEMENT_RECORD = "record.enforcement"
USER_KEY_PREFIX = "user:"  # the same key space as grebe.flows.sinks user records
RECORD_VERSION = "1"
SEP = "|"


@dataclass(frozen=True, slots=True)
class Enforcement:
    post_id: str
    category: str
    action: str
    at: float


def _entry(key: str, at: float) -> Enforcement | None:
    parts = key.split(SEP, 2)
    return Enforcement(parts[2], parts[0], parts[1], at) if len(parts) == 3 else None


class EnforcementHistory:
    """Recent enforcement actions per author, kept in the annotation store."""

    def __init__(self, store: AnnotationStore, *, entries_per_author: int, window_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._per_author = entries_per_author
        self._window_s = window_s
        self._clock = clock
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary())

    async def _entries(self, author_id: str) -> list[Enforcement]:
        rows = await self._store.get(f"{USER_KEY_PREFIX}{author_id}")
        row = next((a for a in rows if a.producer == ENFORCEMENT_RECORD), None)
        found = [_entry(k, at) for k, at in (row.scores if row is not None else {}).items()]
        return sorted((e for e in found if e is not None), key=lambda e: e.at)

    async def prior(self, author_id: str, category: str, exclude_post: str) -> list[Enforcement]:
        """The author's actions in `category` within the window, other posts only (a
        retry of the same post never counts against its author)."""
        horizon = self._clock() - self._window_s
        return [e for e in await self._entries(author_id)
                if e.category == category and e.at >= horizon and e.post_id != exclude_post]

    async def record(self, author_id: str, post_id: str, category: str, action: str) -> None:
        key = f"{USER_KEY_PREFIX}{author_id}"
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        async with lock:
            entries = await self._entries(author_id)
            if any(e.post_id == post_id and e.category == category for e in entries):
                return
            now = self._clock()
            entries.append(Enforcement(post_id, category, action, now))
            kept = [e for e in entries if e.at >= now - self._window_s][-self._per_author:]
            await self._store.upsert([Annotation(
                post_id=key, producer=ENFORCEMENT_RECORD, version=RECORD_VERSION,
                scores={SEP.join((e.category, e.action, e.post_id)): e.at for e in kept})])
