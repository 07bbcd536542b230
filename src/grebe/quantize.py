"""Embeddings in few bytes: int8 with one float32 scale per vector, for the store and
the output topic alike.

A 384-d embedding takes 384 bytes plus its scale (~7.7 KB as decimal floats, 768 as
float16); on the bench tweets' MiniLM vectors the cosine to the float32 original is
0.99997 at the median and 0.99994 at worst (float16: 0.9999999), far inside what nearest-
neighbour retrieval can tell apart (docs/benchmarks.md, "Bytes per post on disk").
The scale is `max |x| / 127`, so any magnitude works, normalised or not, rounded to a
float16 value when one holds it: two vectors equal to float16 precision (a text-only
post's mm_emb_v5 and its post embedding differ only in the last float32 bits) then get
the same scale and the same bytes, and the store keeps them once. A vector with a value
that is not finite cannot be scaled: callers keep such a vector as it was.
"""

from __future__ import annotations

import numpy as np

from grebe.identity_cache import IdentityCache

I8_LEVELS = 127  # symmetric: -127..127, so 0 is exact and the scale is max|x| / 127
_F16_NORMAL = np.float32(np.finfo(np.float16).tiny)  # below, float16 loses precision


#: The newest lists packed, by identity, with a copy to compare: an annotation's
#: embedding is packed for the sink's finite check and the output topic on the event
#: loop and for the store in its writer thread, the same list each time (~20 us a pack,
#: most of it reading 384 Python floats; comparing with the copy costs ~1.5 us).
RECENT_VECTORS = 256
_recent: IdentityCache[list[float], tuple[float, bytes] | None] = IdentityCache(
    RECENT_VECTORS, snapshot=list)


def to_i8(vector: list[float]) -> tuple[float, bytes] | None:
    """(scale, int8 bytes) of `vector`; None when a value is not finite. A list packed
    lately (the same object, still equal to what it held) is not packed again."""
    if type(vector) is not list:
        return _to_i8(vector)
    return _recent.get(vector, _to_i8)


def _to_i8(vector: list[float]) -> tuple[float, bytes] | None:
    values = np.asarray(vector, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        peak = np.float32(np.abs(values).max()) if values.size else np.float32(0)
    if not np.isfinite(peak):
        return None
    scale = np.float32(peak / I8_LEVELS)
    with np.errstate(over="ignore", under="ignore"):
        coarse = np.float32(np.float16(scale))
    if np.isfinite(coarse) and coarse >= _F16_NORMAL:  # else out of float16's range
        scale = coarse
    if scale == 0:
        return 0.0, bytes(values.size)
    quantized = np.clip(np.rint(values / scale), -I8_LEVELS, I8_LEVELS).astype(np.int8)
    return float(scale), quantized.tobytes()


def from_i8(scale: float, data: bytes, dims: int) -> list[float]:
    """The floats of (scale, int8 bytes); ValueError when the bytes are not `dims` long."""
    if len(data) != dims:
        raise ValueError(f"int8 vector of {dims} dims needs {dims} bytes, holds {len(data)}")
    values = np.frombuffer(data, dtype=np.int8).astype(np.float32) * np.float32(scale)
    return values.tolist()  # type: ignore[no-any-return]
