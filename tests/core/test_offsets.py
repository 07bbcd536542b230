import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grebe.core.offsets import OffsetTracker


def test_commits_only_up_to_lowest_unfinished() -> None:
    tracker = OffsetTracker()
    for offset in range(5):
        tracker.track(0, offset)
    tracker.finish(0, 3)
    tracker.finish(0, 1)
    assert tracker.committable() == {}
    assert tracker.lowest_unfinished(0) == 0
    tracker.finish(0, 0)
    assert tracker.committable() == {0: 2}  # 0 and 1 done; 2 still running
    assert tracker.lowest_unfinished(0) == 2
    assert tracker.pending(0) == 2
    tracker.finish(0, 2)
    tracker.finish(0, 4)
    assert tracker.committable() == {0: 5}
    assert tracker.pending(0) == 0
    assert tracker.lowest_unfinished(0) is None


def test_only_partitions_that_advanced_since_last_commit() -> None:
    tracker = OffsetTracker()
    for partition in (0, 1):
        tracker.track(partition, 10)
        tracker.track(partition, 11)
    tracker.finish(0, 10)
    tracker.finish(1, 10)
    assert tracker.committable() == {0: 11, 1: 11}
    tracker.mark_committed(0, 11)
    tracker.mark_committed(1, 11)
    assert tracker.committable() == {}
    tracker.finish(1, 11)
    assert tracker.committable() == {1: 12}


def test_gaps_in_offsets_do_not_hold_a_partition_back() -> None:
    tracker = OffsetTracker()
    for offset in (5, 9, 20):  # 6-8 and 10-19 compacted away or transaction markers
        tracker.track(3, offset)
    tracker.finish(3, 5)
    assert tracker.committable() == {3: 6}
    tracker.finish(3, 20)
    assert tracker.committable() == {3: 6}
    tracker.finish(3, 9)
    assert tracker.committable() == {3: 21}


def test_revoke_forgets_the_partition() -> None:
    tracker = OffsetTracker()
    tracker.track(0, 1)
    tracker.track(0, 2)
    tracker.finish(0, 2)
    tracker.revoke(0)
    assert tracker.pending(0) == 0
    assert tracker.committable() == {}
    assert tracker.partitions == []
    tracker.track(0, 1)  # re-assigned and seeked back: allowed after revoke
    assert tracker.lowest_unfinished(0) == 1


def test_bad_calls_are_refused_clearly() -> None:
    tracker = OffsetTracker()
    with pytest.raises(ValueError, match="not tracked"):
        tracker.finish(0, 1)
    tracker.track(0, 1)
    tracker.track(0, 3)
    with pytest.raises(ValueError, match="out of order"):
        tracker.track(0, 2)
    with pytest.raises(ValueError, match="out of order"):
        tracker.track(0, 3)
    with pytest.raises(ValueError, match="not tracked"):
        tracker.finish(0, 2)  # a gap, never handed out
    tracker.finish(0, 1)
    with pytest.raises(ValueError, match="already finished"):
        tracker.finish(0, 1)
    with pytest.raises(ValueError, match="out of order"):
        tracker.track(0, 1)  # below the committed position


@settings(max_examples=200, deadline=None)
@given(
    gaps=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=60),
    partitions=st.integers(min_value=1, max_value=3),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_commit_never_passes_an_unfinished_offset(
    gaps: list[int], partitions: int, seed: int
) -> None:
    rng = random.Random(seed)
    tracker = OffsetTracker()
    offsets: dict[int, list[int]] = {p: [] for p in range(partitions)}
    for i, gap in enumerate(gaps):
        p = i % partitions
        offset = (offsets[p][-1] if offsets[p] else -1) + gap
        offsets[p].append(offset)
        tracker.track(p, offset)
    order = [(p, o) for p, os in offsets.items() for o in os]
    rng.shuffle(order)
    finished: set[tuple[int, int]] = set()
    committed: dict[int, int] = {}
    for p, o in order:
        tracker.finish(p, o)
        finished.add((p, o))
        if rng.random() < 0.5:
            for partition, next_offset in tracker.committable().items():
                assert next_offset > committed.get(partition, -1)  # only moves forward
                committed[partition] = next_offset
                tracker.mark_committed(partition, next_offset)
        for partition, next_offset in committed.items():
            unfinished = [x for x in offsets[partition] if (partition, x) not in finished]
            if unfinished:
                assert next_offset <= min(unfinished)
            lowest = tracker.lowest_unfinished(partition)
            assert lowest == (min(unfinished) if unfinished else None)
            assert tracker.pending(partition) == len(unfinished)
    committed.update(tracker.committable())
    assert committed == {p: os[-1] + 1 for p, os in offsets.items() if os}
