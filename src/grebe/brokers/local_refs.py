"""Local log values stored against an earlier value of the same key: the output topic
carries several annotations per post (five for the six default flows), and two of them
often hold the same int8 vector (a text-only post's mm_emb_v5 equals its summary
embedding) beside the same post id, fingerprint, language reason and policy. Each
message is whole on the wire (a consumer decodes it on its own); at rest, a value
compressed with the previous stored value of its key as zstd's dictionary drops what it
repeats: 1,490 -> ~1,070 bytes per post for the output topic (docs/benchmarks.md,
"Bytes per post on disk", third round).

Rules that keep every row readable:
- a referent is always a row stored on its own (raw or against the packaged dictionary),
  so reading a value needs at most one other row;
- a row refers back at most `C.LOG_REF_SPAN` offsets in its own topic and partition;
- a referent is checked to still exist in the writing transaction (retention may have
  removed it since it was remembered), and retention never deletes a row another
  surviving row refers to (local_retention);
- what is remembered comes only from committed transactions (`commit` after the write),
  so a rolled-back batch leaves nothing to refer to.

One `ValueRefs` per LocalLog, used only in its database thread.
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict
from dataclasses import dataclass

import zstandard

from grebe import constants as C

RefKey = tuple[int, int, bytes]  # topic id, partition, message key


@dataclass(frozen=True, slots=True)
class Referent:
    offset: int
    value: bytes  # as appended


def _dictionary(value: bytes) -> zstandard.ZstdCompressionDict:
    return zstandard.ZstdCompressionDict(value, dict_type=zstandard.DICT_TYPE_RAWCONTENT)


def expand(frame: bytes, referent: bytes) -> bytes:
    """The value of a frame compressed against `referent` (ValueError if corrupt)."""
    try:
        return zstandard.ZstdDecompressor(dict_data=_dictionary(referent)).decompress(frame)  # type: ignore[no-any-return]
    except zstandard.ZstdError as exc:
        raise ValueError(f"local log: corrupt referencing frame: {exc}") from exc


class ValueRefs:
    """The latest value stored on its own per (topic, partition, key), for the next
    value of that key to be compressed against."""

    def __init__(self, capacity: int = C.LOG_REF_CACHE_KEYS, span: int = C.LOG_REF_SPAN,
                 level: int = C.LOG_ZSTD_LEVEL) -> None:
        self.capacity = capacity
        self.span = span
        self.level = level
        self._latest: OrderedDict[RefKey, Referent] = OrderedDict()
        self._pending: dict[RefKey, Referent] = {}

    def candidate(self, conn: sqlite3.Connection, key: RefKey, offset: int) -> Referent | None:
        """A referent for the value of `key` about to be stored at `offset`, if one is
        near enough and still in the log."""
        found = self._pending.get(key) or self._latest.get(key)
        if found is None or not 0 < offset - found.offset <= self.span:
            return None
        if key in self._pending and self._pending[key] is found:
            return found  # written in this same transaction
        row = conn.execute(
            "SELECT 1 FROM messages WHERE topic_id = ? AND part = ? AND msg_offset = ? "
            "AND ref IS NULL", (key[0], key[1], found.offset)).fetchone()
        return found if row is not None else None

    def compress(self, value: bytes, referent: Referent) -> bytes:
        compressor = zstandard.ZstdCompressor(
            level=self.level, dict_data=_dictionary(referent.value), write_checksum=False,
            write_content_size=True, write_dict_id=False)
        return compressor.compress(value)  # type: ignore[no-any-return]

    def stored_alone(self, key: RefKey, offset: int, value: bytes) -> None:
        """A value of `key` stored on its own in the open transaction."""
        self._pending[key] = Referent(offset, value)

    def commit(self) -> None:
        """The transaction committed: what it stored alone may now be referred to."""
        for key, referent in self._pending.items():
            self._latest[key] = referent
            self._latest.move_to_end(key)
        self._pending.clear()
        while len(self._latest) > self.capacity:
            self._latest.popitem(last=False)

    def rollback(self) -> None:
        self._pending.clear()
