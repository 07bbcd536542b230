"""Annotation bodies at rest: zstd frames against a packaged dictionary.

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

import threading
from importlib import resources

import zstandard

from grebe import constants as C

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # every zstd frame starts so; msgpack and JSON never do
_local = threading.local()  # zstd contexts are not thread-safe; stores run in threads
_lock = threading.Lock()
_dictionaries: dict[int, zstandard.ZstdCompressionDict] = {}


def _dictionary(dict_id: int) -> zstandard.ZstdCompressionDict:
    """The packaged dictionary with this id (loaded once per process)."""
    with _lock:
        if not _dictionaries:
            folder = resources.files("grebe.data")
            for entry in folder.iterdir():
                if entry.name.startswith(C.BODY_DICT_PREFIX):
                    found = zstandard.ZstdCompressionDict(entry.read_bytes())
                    _dictionaries[found.dict_id()] = found
        if dict_id not in _dictionaries:
            raise ValueError(f"body compressed with unknown dictionary {dict_id} "
                             f"(shipped: {sorted(_dictionaries)})")
        return _dictionaries[dict_id]


def _compressor() -> zstandard.ZstdCompressor:
    compressor = getattr(_local, "compressor", None)
    if compressor is None:
        compressor = zstandard.ZstdCompressor(
            level=C.BODY_ZSTD_LEVEL, dict_data=_dictionary(C.BODY_DICT_ID),
            write_checksum=False, write_content_size=True)
        _local.compressor = compressor
    return compressor


def compress(body: bytes) -> bytes:
    return _compressor().compress(body)


def is_compressed(blob: bytes) -> bool:
    return blob[:4] == ZSTD_MAGIC


def decompress(blob: bytes) -> bytes:
    """The body of a frame written by `compress` (by this or an earlier version)."""
    try:
        dict_id = zstandard.get_frame_parameters(blob).dict_id
        cache: dict[int, zstandard.ZstdDecompressor] = _local.__dict__.setdefault(
            "decompressors", {})
        if dict_id not in cache:
            cache[dict_id] = zstandard.ZstdDecompressor(dict_data=_dictionary(dict_id))
        return cache[dict_id].decompress(blob)
    except zstandard.ZstdError as exc:
        raise ValueError(f"corrupt compressed body: {exc}") from exc
