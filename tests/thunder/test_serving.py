"""The serving rows (thunder/serving.py): in step with the authors' lists after every
kind of write, slots found by the numpy index, and excluded posts deeper than a row."""

from __future__ import annotations

import random

import numpy as np
import pytest

from grebe.thunder.events import PostDelete
from grebe.thunder.serving import HEADROOM, NONE, SlotIndex
from grebe.thunder.store import InNetworkQuery, ThunderStore

from .test_store import create, ids, make_store, random_store


def assert_rows_match_lists(store: ThunderStore) -> None:
    serving = store.serving
    held = sorted(store.authors)
    slots = serving.index.lookup(held).tolist()
    assert slots == [store.authors[a].slot for a in held]
    assert serving.index.lookup(["nobody-at-all"]).tolist() == [-1]
    assert serving.slot_of == {a: store.authors[a].slot for a in held}
    for table in (serving.main, serving.videos):
        if not table.width:
            continue
        times, places, hashes = table.rows(np.array(slots, dtype=np.intp), hashes=True)
        assert hashes is not None
        for row, author in enumerate(held):
            posts = store.authors[author]
            assert serving.owners[posts.slot] is posts
            for attr, o, _, w in table.parts:
                tail = getattr(posts, attr)[-w:]
                pad = w - len(tail)
                assert times[row, o : o + w].tolist() == [NONE] * pad + [
                    p.created_at for p in tail]
                at = places[row, o : o + w].tolist()
                assert [table.records[i] for i in at[pad:]] == tail
                assert all(table.records[i] is p for i, p in zip(at[pad:], tail, strict=True))
                assert hashes[row, o + pad : o + w].tolist() == [
                    float(hash(p.post_id)) for p in tail]
    # A freed slot's rows hold nothing (its records are let go).
    free = set(range(len(serving.owners))) - set(slots)
    for slot in free:
        assert serving.owners[slot] is None
        for table in (serving.main, serving.videos):
            row = table.records[slot * table.width : (slot + 1) * table.width]
            assert row == [None] * table.width


@pytest.mark.parametrize("seed", range(30))
def test_rows_stay_in_step_with_the_lists(seed: int) -> None:
    # Out-of-order creates, evictions by small caps, deletes, late parents, trims.
    store, _, _ = random_store(seed)
    assert_rows_match_lists(store)


def test_rows_follow_trims_and_reused_slots() -> None:
    store, clock = make_store(retention_s=100.0)
    for i in range(30):
        store.apply(create(f"a{i}", "a", age_s=90 - i))
    store.apply(create("b0", "b", age_s=95))
    clock.now += 50
    store.trim()  # b is gone, a keeps its newest
    assert "b" not in store.authors
    store.apply(create("c0", "c", age_s=-40))  # takes b's slot
    assert_rows_match_lists(store)
    assert ids(store, following=("b", "c")) == ["c0"]


def test_excluded_posts_beyond_a_rows_room_are_found_in_the_lists() -> None:
    store, _ = make_store(serve_originals_per_author=5, max_originals_per_author=64)
    for i in range(30):
        store.apply(create(f"p{i}", "a", age_s=100 - i))
    room = 5 * HEADROOM
    seen = {f"p{29 - i}" for i in range(room - 2)}  # leaves 2 in the row, 5 wanted
    assert ids(store, following=("a",), exclude_post_ids=seen) == [
        f"p{i}" for i in range(21, 16, -1)]
    # Only the newest `max_scan_per_author` are looked at (the default 32 > 30 here).
    narrow, _ = make_store(max_scan_per_author=12)
    for i in range(30):
        narrow.apply(create(f"p{i}", "a", age_s=100 - i))
    assert ids(narrow, following=("a",), exclude_post_ids=seen) == [
        "p21", "p20", "p19", "p18"]


def test_a_slot_freed_during_a_scan_is_not_read_as_its_new_author() -> None:
    store, _ = make_store(scan_chunk=1)
    store.apply(create("x0", "x", age_s=10))
    store.apply(create("y0", "y", age_s=20))
    scan = store.scan(InNetworkQuery(user_id="v", following_user_ids=["x", "y"]))
    next(scan)  # x looked up: its slot
    store.apply(PostDelete(post_id="x0"))  # x's slot is freed ...
    store.apply(create("z0", "z", age_s=5))  # ... and given to z, not followed
    with pytest.raises(StopIteration) as done:
        next(scan)
    assert [p.post_id for p in done.value.value.posts] == ["y0"]


class SameHash(str):
    """An id whose hash collides with every other SameHash."""

    def __hash__(self) -> int:
        return 42


def test_slot_index_survives_growth_removals_and_colliding_hashes() -> None:
    slot_of: dict[str, int] = {}
    index = SlotIndex(slot_of)
    names = [f"u{i}" for i in range(5000)]
    for slot, name in enumerate(names):
        index.add(name, slot)
        slot_of[name] = slot
    index.lookup(names[:1])  # puts the added in the table (a rebuild)
    for name in names[::2]:
        index.remove(name, slot_of.pop(name))
    index.add(SameHash("s0"), 8999)
    slot_of[SameHash("s0")] = 8999
    index.lookup(names[:1])  # s0 goes in without a rebuild
    assert len(index.keys) >= 4 * 5000
    for slot, name in enumerate(["r1", "r2", SameHash("s1"), SameHash("s2")], 9000):
        index.add(name, slot)
        slot_of[name] = slot
    wanted = [*names, "r1", "r2", SameHash("s1"), SameHash("s2"), SameHash("s3"), "nobody"]
    expected = [slot_of.get(n, -1) for n in wanted]
    assert index.lookup(wanted).tolist() == expected
    assert expected[-4:] == [9002, 9003, -1, -1]
    assert index.shared == {42}
    assert index.used * 2 <= len(index.keys)


def test_distinct_authors_of_places_are_counted_by_row() -> None:
    """A query's distinct authors, counted by each place's row (slot) in a mask: the
    number of distinct places // width, none for no places."""
    from grebe.thunder.query import _Rebuilt

    prng = random.Random(3)
    for n in (0, 1, 50, 1000):
        places = [prng.randrange(400 * 24) for _ in range(n)]
        assert _Rebuilt(400 * 24).authors(places, 24) == len({p // 24 for p in places})
