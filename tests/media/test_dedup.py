"""Near-duplicate detection on real photos, and the BK-tree against a linear scan."""

from __future__ import annotations

import io
import random
import threading
from pathlib import Path

import numpy as np
from PIL import Image

from grebe.media.config import DedupConfig, MediaConfig
from grebe.media.dedup import (
    DEFAULT_MAX_ENTRIES,
    HashEntry,
    NearDuplicateIndex,
    hamming,
    perceptual_hash,
)
from grebe.media.image import decode_image
from grebe.media.pipeline import MediaPipeline

UNRELATED = ["coffee.png", "chelsea.png", "camera.png", "rocket.jpg", "motorcycle_left.png",
             "hubble_deep_field.jpg", "page.png", "coins.png", "horse.png", "brick.png"]


def _rgb(path: Path) -> np.ndarray:
    return decode_image(path, max_pixels=50_000_000).rgb


def _recompressed_copy(rgb: np.ndarray) -> np.ndarray:
    """What a re-upload looks like: scaled to 60%, slightly cropped, JPEG quality 40."""
    image = Image.fromarray(rgb)
    w, h = image.size
    image = image.crop((6, 6, w - 6, h - 6)).resize((int(w * 0.6), int(h * 0.6)))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=40)
    return np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB"))


def test_finds_a_recompressed_copy_and_not_unrelated_photos(photo: Path) -> None:
    index = NearDuplicateIndex()
    original = perceptual_hash(_rgb(photo))
    index.add(HashEntry(post_id="p0", media_key="astronaut", hash=original))
    for i, name in enumerate(UNRELATED, 1):
        index.add(HashEntry(post_id=f"p{i}", media_key=name,
                            hash=perceptual_hash(_rgb(photo.parent / name))))
    copy = perceptual_hash(_recompressed_copy(_rgb(photo)))
    assert hamming(copy, original) <= 6
    matches = index.add_and_match(HashEntry(post_id="repost", media_key="copy", hash=copy), 10)
    assert [m.entry.media_key for m in matches] == ["astronaut"]
    assert index.groups(10) == [["astronaut", "copy"]]
    assert len(index) == len(UNRELATED) + 2


def test_same_post_is_not_its_own_duplicate(photo: Path) -> None:
    index = NearDuplicateIndex()
    h = perceptual_hash(_rgb(photo))
    assert index.add_and_match(HashEntry(post_id="p", media_key="a", hash=h), 4) == []
    assert index.add_and_match(HashEntry(post_id="p", media_key="b", hash=h), 4) == []
    assert [m.entry.media_key for m in
            index.add_and_match(HashEntry(post_id="q", media_key="c", hash=h), 4)] == ["a", "b"]


def test_index_agrees_with_a_plain_hamming_scan() -> None:
    rng = random.Random(42)
    base = [rng.getrandbits(64) for _ in range(50)]
    # Clusters of near values around random centres, plus noise.
    hashes = [b ^ (1 << rng.randrange(64)) ^ (1 << rng.randrange(64)) for b in base
              for _ in range(5)] + [rng.getrandbits(64) for _ in range(500)]
    index = NearDuplicateIndex()
    for i, h in enumerate(hashes):
        index.add(HashEntry(post_id=str(i), media_key=str(i), hash=h))
    for probe in base[:20] + [rng.getrandbits(64) for _ in range(10)]:
        for d in (0, 3, 8, 20):
            got = sorted(int(m.entry.post_id) for m in index.query(probe, d))
            want = sorted(i for i, h in enumerate(hashes) if hamming(h, probe) <= d)
            assert got == want


def test_concurrent_adds_are_safe() -> None:
    index = NearDuplicateIndex()
    rng = random.Random(1)
    values = [rng.getrandbits(64) for _ in range(4000)]

    def add(chunk: list[int], worker: int) -> None:
        for n, h in enumerate(chunk):
            index.add(HashEntry(post_id=f"{worker}-{n}", media_key="m", hash=h))

    threads = [threading.Thread(target=add, args=(values[i::4], i)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(index) == 4000 == len(list(index.entries()))


def test_concurrent_near_duplicates_never_miss_each_other() -> None:
    """Check-then-insert is one atomic step: of any two near-duplicate items added at the
    same time, the later one always finds the earlier (issue 9's question for the product:
    two near-duplicate posts in flight together cannot both miss)."""
    index = NearDuplicateIndex()
    base = 0x0F0F_F0F0_AAAA_5555
    found: dict[str, set[str]] = {}
    barrier = threading.Barrier(8)

    def add(n: int) -> None:
        barrier.wait()
        for k in range(25):
            post = f"p{n}-{k}"
            entry = HashEntry(post_id=post, media_key=post, hash=base ^ (1 << (n % 4)))
            found[post] = {m.entry.post_id for m in index.add_and_match(entry, 4)}

    threads = [threading.Thread(target=add, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    posts = sorted(found)
    assert len(posts) == 200 and len(index) == 200
    missed = [(a, b) for i, a in enumerate(posts) for b in posts[i + 1:]
              if b not in found[a] and a not in found[b]]
    assert missed == []


def test_the_index_keeps_the_most_recent_max_entries_only() -> None:
    """Bounded for an engine's whole life: the oldest hashes make room for new ones."""
    index = NearDuplicateIndex(max_entries=3000)
    rng = random.Random(7)
    hashes = [rng.getrandbits(64) for _ in range(7000)]  # past the arrays' first doubling
    for n, h in enumerate(hashes):
        index.add(HashEntry(post_id=str(n), media_key=str(n), hash=h))
    assert len(index) == 3000
    kept = {e.post_id for e in index.entries()}
    assert kept == {str(n) for n in range(4000, 7000)}
    assert [m.entry.post_id for m in index.query(hashes[6999], 0)] == ["6999"]
    assert [m.entry.post_id for m in index.query(hashes[4000], 0)] == ["4000"]
    assert index.query(hashes[3999], 0) == []  # forgotten
    # A near copy of a kept hash is still found, with its distance.
    match = index.add_and_match(HashEntry(post_id="new", media_key="new",
                                          hash=hashes[5000] ^ 0b101), 2)
    assert [(m.entry.post_id, m.distance) for m in match] == [("5000", 2)]


def test_the_pipeline_index_takes_its_bound_from_the_config() -> None:
    config = MediaConfig(dedup=DedupConfig(max_entries=64))
    assert MediaPipeline(config).index.max_entries == 64
    assert MediaPipeline().index.max_entries == DEFAULT_MAX_ENTRIES


def test_two_engines_indexes_connected_by_peers_each_find_the_others_copies() -> None:
    """Two engines' indexes wired as the dispatcher wires them (each one's published
    entries delivered to the other): a copy posted through the second engine is found
    against the original the first engine indexed, and the other way round."""
    from grebe.core.peers import Peers

    peers = [Peers(), Peers()]
    indexes = [NearDuplicateIndex(100), NearDuplicateIndex(100)]
    for index, mine, other in ((indexes[0], peers[0], peers[1]),
                               (indexes[1], peers[1], peers[0])):
        index.share_with(mine)
        mine.attach(other.deliver)
    original = HashEntry("post-a", "https://a/photo.jpg", 0xF0F0_F0F0_0F0F_0F0F)
    assert indexes[0].add_and_match(original, max_distance=4) == []
    copy = HashEntry("post-b", "https://b/copy.jpg", original.hash ^ 0b101)
    (match,) = indexes[1].add_and_match(copy, max_distance=4)
    assert (match.entry, match.distance) == (original, 2)
    (back,) = indexes[0].query(copy.hash, max_distance=0)
    assert back.entry == copy
    assert len(indexes[0]) == len(indexes[1]) == 2


def test_an_index_with_nobody_to_share_with_publishes_nothing() -> None:
    from grebe.core.peers import Peers

    index = NearDuplicateIndex(10)
    index.share_with(Peers())  # never attached: one engine, or plans in the dispatcher
    index.add(HashEntry("p", "k", 1))
    assert len(index) == 1
