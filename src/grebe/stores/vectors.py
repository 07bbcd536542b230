"""Embeddings at rest: int8 with a float32 scale (grebe.quantize), with their dimension
and encoding, named by content.

A 384-d embedding written as JSON floats takes ~7.7 KB; as int8 it takes 388 bytes
(the scale first, little-endian float32), and its cosine to the original stays above
0.9999. Vectors are named by a digest of those bytes, so the same vector produced by two
plans of one post (a text-only post's mm_emb_v5 equals its text embedding) is stored
once. Rows of earlier versions hold float16 bytes (`f16`) and still read; a vector with
a value int8 cannot scale (not finite) is stored as float16, as before.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import dataclass

import numpy as np

from grebe.quantize import from_i8, to_i8

DTYPE_F16 = "f16"
DTYPE_I8 = "i8"
DIGEST_BYTES = 16
_SCALE = struct.Struct("<f")


@dataclass(frozen=True, slots=True)
class PackedVector:
    digest: bytes
    dims: int
    dtype: str
    data: bytes


def pack(vector: list[float]) -> PackedVector:
    quantized = to_i8(vector)
    if quantized is None:
        data, dtype = np.asarray(vector, dtype=np.float16).tobytes(), DTYPE_F16
    else:
        data, dtype = _SCALE.pack(quantized[0]) + quantized[1], DTYPE_I8
    digest = hashlib.blake2b(data, digest_size=DIGEST_BYTES).digest()
    return PackedVector(digest=digest, dims=len(vector), dtype=dtype, data=data)


def unpack(dims: int, dtype: str, data: bytes) -> list[float]:
    if dtype == DTYPE_I8:
        if len(data) < _SCALE.size:
            raise ValueError("int8 vector without its scale")
        return from_i8(_SCALE.unpack_from(data)[0], data[_SCALE.size:], dims)
    if dtype != DTYPE_F16:
        raise ValueError(f"unknown vector encoding {dtype!r}")
    values = np.frombuffer(data, dtype=np.float16)
    if values.shape[0] != dims:
        raise ValueError(f"vector holds {values.shape[0]} values, expected {dims}")
    return values.astype(np.float32).tolist()  # type: ignore[no-any-return]


def to_text(vector: list[float]) -> str:
    """float16 bytes in base64: how an embedding travels in a JSON message (1 KB for
    384 dimensions instead of ~7.7 KB of decimal floats)."""
    return base64.b64encode(np.asarray(vector, dtype=np.float16).tobytes()).decode("ascii")


def from_text(text: str) -> list[float]:
    data = base64.b64decode(text, validate=True)
    if len(data) % 2:
        raise ValueError("a float16 vector needs an even number of bytes")
    return np.frombuffer(data, dtype=np.float16).astype(np.float32).tolist()  # type: ignore[no-any-return]
