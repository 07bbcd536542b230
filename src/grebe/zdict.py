"""zstd against dictionaries shipped in the package: small records that share most of
their bytes (field names, label names, reason templates, model versions) compress well
only against a dictionary trained on their kind; alone, a 500-byte record barely does.

One `DictCodec` per kind of record (annotation bodies in the store, local-log values),
each with its own file prefix under `grebe/data/`. A frame records its dictionary's id,
so a dictionary is never replaced: a new one ships beside the old under a new id, and
frames written with any shipped dictionary keep reading back. A frame naming a
dictionary that is not shipped is refused with ValueError, never guessed at.
"""

from __future__ import annotations

import threading
from importlib import resources

import zstandard

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # every zstd frame starts so; msgpack and JSON never do


class DictCodec:
    """Compress with the dictionary `<prefix><dict_id>.zdict`; decompress a frame of any
    shipped dictionary of this prefix. Thread-safe: zstd contexts are per thread (stores
    and the local log run their SQL, and this, in threads of their own)."""

    def __init__(self, prefix: str, dict_id: int, level: int) -> None:
        self.prefix = prefix
        self.dict_id = dict_id
        self.level = level
        self._local = threading.local()
        self._lock = threading.Lock()
        self._dictionaries: dict[int, zstandard.ZstdCompressionDict] = {}

    def dictionary(self, dict_id: int) -> zstandard.ZstdCompressionDict:
        """The packaged dictionary with this id (all of this prefix load once)."""
        with self._lock:
            if not self._dictionaries:
                for entry in resources.files("grebe.data").iterdir():
                    if entry.name.startswith(self.prefix):
                        found = zstandard.ZstdCompressionDict(entry.read_bytes())
                        self._dictionaries[found.dict_id()] = found
            if dict_id not in self._dictionaries:
                raise ValueError(f"{self.prefix}: compressed with unknown dictionary "
                                 f"{dict_id} (shipped: {sorted(self._dictionaries)})")
            return self._dictionaries[dict_id]

    def compress(self, data: bytes) -> bytes:
        compressor = getattr(self._local, "compressor", None)
        if compressor is None:
            compressor = zstandard.ZstdCompressor(
                level=self.level, dict_data=self.dictionary(self.dict_id),
                write_checksum=False, write_content_size=True)
            self._local.compressor = compressor
        return compressor.compress(data)  # type: ignore[no-any-return]

    def decompress(self, frame: bytes) -> bytes:
        """The data of a frame written by `compress` (by this or an earlier version);
        ValueError for a corrupt frame or an unknown dictionary."""
        try:
            dict_id = zstandard.get_frame_parameters(frame).dict_id
            cache: dict[int, zstandard.ZstdDecompressor] = self._local.__dict__.setdefault(
                "decompressors", {})
            if dict_id not in cache:
                cache[dict_id] = zstandard.ZstdDecompressor(
                    dict_data=self.dictionary(dict_id))
            return cache[dict_id].decompress(frame)  # type: ignore[no-any-return]
        except zstandard.ZstdError as exc:
            raise ValueError(f"{self.prefix}: corrupt compressed frame: {exc}") from exc
