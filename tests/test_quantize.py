"""int8 packing (grebe.quantize): a list packed lately is not packed again, and a list
changed in place since is."""

from __future__ import annotations

import numpy as np

from grebe import quantize


def _vector(seed: int) -> list[float]:
    return np.random.default_rng(seed).normal(size=384).astype(np.float32).tolist()  # type: ignore[no-any-return]


def test_a_list_packed_again_gives_the_same_bytes_without_packing(monkeypatch) -> None:
    vector = _vector(1)
    first = quantize.to_i8(vector)
    packs: list[object] = []
    monkeypatch.setattr(quantize, "_to_i8", lambda v: packs.append(v))
    assert quantize.to_i8(vector) == first
    assert packs == []


def test_a_list_changed_in_place_is_packed_anew() -> None:
    vector = _vector(2)
    before = quantize.to_i8(vector)
    vector[0] = 1000.0
    after = quantize.to_i8(vector)
    assert after == quantize._to_i8(list(vector)) and after != before
    vector[1] = float("nan")
    assert quantize.to_i8(vector) is None


def test_equal_lists_and_arrays_pack_alike_and_the_memo_stays_bounded() -> None:
    vectors = [_vector(seed) for seed in range(quantize.RECENT_VECTORS + 50)]
    packed = [quantize.to_i8(v) for v in vectors]
    assert len(quantize._recent) <= quantize.RECENT_VECTORS
    assert packed[0] == quantize.to_i8(list(vectors[0]))
    assert packed[0] == quantize.to_i8(np.asarray(vectors[0], dtype=np.float32))  # type: ignore[arg-type]
