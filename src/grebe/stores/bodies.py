"""Annotation bodies at rest: zstd frames against a packaged dictionary (grebe.zdict).

A body (msgpack, the embedding taken out) is ~500 bytes of which most is the same on
every row: field names, label and score names, reason templates, model versions. Alone
it barely compresses (zlib: 3.1 -> 2.3 KB per post of six flows); against a dictionary
trained on real annotations it drops to ~0.66 KB per post, at ~2 µs per row to write
and ~1 µs to read (bench tweets, one-off, docs/benchmarks.md).

The frame records its dictionary's id, so a dictionary is never replaced: a new one is
shipped beside the old under a new id (`scripts/annotation_dict.py`) and rows written
with any shipped dictionary keep reading back. A frame naming an unknown dictionary is
refused with ValueError (the store reports it as a StoreError), never guessed at.
"""

from __future__ import annotations

from grebe import constants as C
from grebe.zdict import ZSTD_MAGIC, DictCodec

_codec = DictCodec(C.BODY_DICT_PREFIX, C.BODY_DICT_ID, C.BODY_ZSTD_LEVEL)


def compress(body: bytes) -> bytes:
    return _codec.compress(body)


def is_compressed(blob: bytes) -> bool:
    return blob[:4] == ZSTD_MAGIC


def decompress(blob: bytes) -> bytes:
    """The body of a frame written by `compress` (by this or an earlier version)."""
    return _codec.decompress(blob)
