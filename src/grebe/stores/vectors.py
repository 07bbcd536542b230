"""Embeddings at rest: float16 bytes with their dimension, named by content.

A 384-d embedding written as JSON floats takes ~7.7 KB; as float16 it takes 768 bytes,
and its cosine to the original stays above 0.9999 (unit vectors, |x| < 1). Vectors are
named by a digest of those bytes, so the same vector produced by two plans of one post
(a text-only post's mm_emb_v5 equals its text embedding) is stored once.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

import numpy as np

DTYPE_F16 = "f16"
DIGEST_BYTES = 16


@dataclass(frozen=True, slots=True)
class PackedVector:
    digest: bytes
    dims: int
    dtype: str
    data: bytes


def pack(vector: list[float]) -> PackedVector:
    data = np.asarray(vector, dtype=np.float16).tobytes()
    digest = hashlib.blake2b(data, digest_size=DIGEST_BYTES).digest()
    return PackedVector(digest=digest, dims=len(vector), dtype=DTYPE_F16, data=data)


def unpack(dims: int, dtype: str, data: bytes) -> list[float]:
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
