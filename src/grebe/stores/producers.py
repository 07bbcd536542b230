"""Producer names at rest as short codes: the SQLite store's `producer` column repeats
a plan name (~15 characters: `post_embedding_with_summary` is 27) on every row, six or
more a post; a table of names (`producers`: id -> name) lets a row hold its id as a
1-byte BLOB instead (~90 bytes a post of six flows).

A code is a BLOB, a name TEXT: SQLite never converts a BLOB in a TEXT column and never
equals the two, so rows of earlier versions (the name itself) and new rows (a code)
are told apart with no flag, and a row of an earlier version is moved to its code the
next time its key is written (`adopt`), so a key never has two rows.

Codes come from the store's own table inside the writing transaction, so every process
sharing the file agrees on them; one is remembered for later transactions only once its
transaction committed (a rolled-back insert may give its id to another name).
"""

from __future__ import annotations

import sqlite3

SCHEMA = """
CREATE TABLE IF NOT EXISTS producers (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);
"""
_INSERT = "INSERT OR IGNORE INTO producers (name) VALUES (?)"
_ID = "SELECT id FROM producers WHERE name = ?"
_NAME = "SELECT name FROM producers WHERE id = ?"
# A row of an earlier version under the plain name takes its code (its key is being
# written again: the upsert that follows then finds it, keeping its created_at).
_ADOPT = ("UPDATE annotations SET producer = ? "
          "WHERE post_id = ? AND producer = ? AND version = ?")


def _as_code(producer_id: int) -> bytes:
    return producer_id.to_bytes(max(1, (producer_id.bit_length() + 7) // 8), "big")


class ProducerCodes:
    """Name <-> code for one store file; used only in the store's database thread."""

    def __init__(self) -> None:
        # False for a store created with codes (no row under a plain name): no `adopt`
        self.names_at_rest = True
        self._codes: dict[str, bytes] = {}  # committed
        self._pending: dict[str, bytes] = {}
        self._names: dict[bytes, str] = {}

    def code(self, conn: sqlite3.Connection, name: str) -> bytes:
        """The code of `name`, made in the open write transaction if it is new."""
        found = self._codes.get(name) or self._pending.get(name)
        if found is None:
            conn.execute(_INSERT, (name,))
            (producer_id,) = conn.execute(_ID, (name,)).fetchone()
            found = self._pending[name] = _as_code(producer_id)
        return found

    def adopt(self, conn: sqlite3.Connection, post_id: str, name: str, version: str,
              code: bytes) -> None:
        conn.execute(_ADOPT, (code, post_id, name, version))

    def commit(self) -> None:
        self._codes.update(self._pending)
        self._pending.clear()

    def rollback(self) -> None:
        self._pending.clear()

    def name(self, conn: sqlite3.Connection, stored: str | bytes) -> str:
        """The producer name of a row's column: a code, or the name itself (rows of
        earlier versions). ValueError for a code the table does not hold."""
        if isinstance(stored, str):
            return stored
        found = self._names.get(stored)
        if found is None:
            row = conn.execute(_NAME, (int.from_bytes(stored, "big"),)).fetchone()
            if row is None:
                raise ValueError(f"producer code {stored.hex()} is not in the store")
            found = self._names[stored] = row[0]
        return found
