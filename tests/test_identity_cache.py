"""grebe.identity_cache: found by identity, recomputed when changed, bounded."""

from __future__ import annotations

from grebe.identity_cache import IdentityCache


def test_the_same_object_is_computed_once_an_equal_one_again() -> None:
    calls: list[tuple[int, ...]] = []

    def compute(value: tuple[int, ...]) -> int:
        calls.append(value)
        return sum(value)

    cache: IdentityCache[tuple[int, ...], int] = IdentityCache(4)
    first = (1, 2, 3)
    assert cache.get(first, compute) == 6 and cache.get(first, compute) == 6
    assert len(calls) == 1
    assert cache.get(tuple([1, 2, 3]), compute) == 6  # equal, but another object
    assert len(calls) == 2


def test_an_object_changed_in_place_is_computed_again_with_a_snapshot() -> None:
    cache: IdentityCache[list[int], int] = IdentityCache(4, snapshot=list)
    values = [1, 2]
    assert cache.get(values, sum) == 3
    values.append(4)
    assert cache.get(values, sum) == 7
    unsnapshotted: IdentityCache[list[int], int] = IdentityCache(4)
    assert unsnapshotted.get(values, sum) == 7
    values.append(1)
    assert unsnapshotted.get(values, sum) == 7  # without a snapshot, identity is all


def test_at_most_size_entries_the_oldest_dropped() -> None:
    cache: IdentityCache[list[int], int] = IdentityCache(3, snapshot=list)
    kept = [[n] for n in range(10)]
    for values in kept:
        cache.get(values, sum)
    assert len(cache) == 3
    calls = []
    cache.get(kept[0], lambda v: calls.append(v) or sum(v))  # dropped: computed again
    cache.get(kept[-1], lambda v: calls.append(v) or sum(v))  # newest: remembered
    assert calls == [[0]]
