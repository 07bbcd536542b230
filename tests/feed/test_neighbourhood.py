"""A viewer's out-of-network neighbourhood is reused (issue 13, feed CPU): a returning
viewer's request makes no index search, yet what changed since is honoured on every
request (posts seen or engaged with, authors followed, posts deleted); the searches run
again when the window has passed, when the interests change, when what is left cannot
fill the page, and always with the cache off."""

from __future__ import annotations

import numpy as np

from grebe.feed.candidates import HomeQuery
from grebe.feed.settings import FeedSettings
from grebe.feed.sources import SimilarPostsSource
from grebe.thunder.store import ThunderStore

from .worlds import CountingIndex, random_world


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _world(cache_s: float = 30.0) -> tuple[SimilarPostsSource, CountingIndex, ThunderStore,
                                           Clock, np.ndarray]:
    store, index, vectors, _ = random_world(8, posts=2000, authors=200)
    clock = Clock()
    settings = FeedSettings.model_validate({"out_of_network_max": 40, "min_similarity": 0.3,
                                            "neighbourhood_cache_s": cache_s})
    return SimilarPostsSource(index, store, settings, clock=clock), index, store, clock, vectors


def _query(vectors: np.ndarray, rows: list[int], **extra: object) -> HomeQuery:
    engaged = vectors[rows]
    mean = engaged.mean(axis=0)
    return HomeQuery(user_id="me", interest_vector=(mean / np.linalg.norm(mean)).tolist(),
                     interest_vectors=engaged.tolist(), **extra)  # type: ignore[arg-type]


async def test_a_returning_viewer_picks_from_the_kept_neighbourhood() -> None:
    source, index, store, clock, vectors = _world()
    first = [(c.post_id, c.author_id, c.similarity, c.source)
             for c in await source.fetch(_query(vectors, [3, 900]))]
    assert len(index.calls) == 1 and len(first) == 40

    # Since then: five posts were seen, one engaged with, one deleted, an author followed.
    seen = {pid for pid, *_ in first[:5]}
    deleted, engaged = first[5][0], first[6][0]
    followed = first[7][1]
    store.delete(deleted)
    clock.now += 10
    again = await source.fetch(_query(vectors, [3, 900], seen=seen, engaged=[engaged],
                                      following=[followed]))
    assert len(index.calls) == 1  # no search: picked from the kept neighbourhood
    got = [(c.post_id, c.author_id, c.similarity, c.source) for c in again]
    assert len(got) == 40
    ids = {pid for pid, *_ in got}
    assert not ids & (seen | {deleted, engaged})
    assert all(author != followed for _, author, _, _ in got)
    # The rest keeps its order and similarities: the first request's answer, less
    # what was left out, then the next posts of the neighbourhood.
    left = [row for row in first if row[0] not in seen | {deleted, engaged}
            and row[1] != followed]
    assert got[: len(left)] == left
    assert [s for _, _, s, _ in got] == sorted((s for _, _, s, _ in got), reverse=True)

    # Nearly the answer of a fresh search given the same exclusions, the cache off (an
    # approximate search that skips those posts walks the graph a little differently).
    fresh, _, fresh_store, _, _ = _world(cache_s=0)
    fresh_store.delete(deleted)
    answer = await fresh.fetch(_query(vectors, [3, 900], seen=seen, engaged=[engaged],
                                      following=[followed]))
    assert len({c.post_id for c in answer} & ids) >= 0.8 * len(ids)


async def test_the_searches_run_again_when_the_window_passes_or_interests_change() -> None:
    source, index, _, clock, vectors = _world()
    await source.fetch(_query(vectors, [3, 900]))
    clock.now += 29
    await source.fetch(_query(vectors, [3, 900]))
    assert len(index.calls) == 1
    await source.fetch(_query(vectors, [3, 901]))  # engaged with something else
    assert len(index.calls) == 2
    clock.now += 31  # the window has passed
    await source.fetch(_query(vectors, [3, 900]))
    assert len(index.calls) == 3
    assert source.neighbourhoods.hits == 1


async def test_a_kept_neighbourhood_the_viewer_has_used_up_is_searched_again() -> None:
    source, index, _, _, vectors = _world()
    first = await source.fetch(_query(vectors, [3, 900]))
    seen = {c.post_id for c in first}
    again = await source.fetch(_query(vectors, [3, 900], seen=seen))
    assert len(index.calls) == 2 and len(again) == 40 and not {c.post_id for c in again} & seen


async def test_without_the_cache_every_request_searches() -> None:
    source, index, _, _, vectors = _world(cache_s=0)
    for _ in range(3):
        await source.fetch(_query(vectors, [3, 900]))
    assert len(index.calls) == 3
