"""The home request's fast paths (issue 13, feed CPU) give the answers of the plain ones:
the interest signal from one concatenated matrix equals the row-by-row one, with or
without candidates lacking an embedding; the out-of-network merge (two C sorts, first
occurrence wins) equals "best similarity per post, then by similarity, ties by id"."""

from __future__ import annotations

import random

import numpy as np
import pytest

from grebe.feed.candidates import FeedCandidate, HomeQuery
from grebe.feed.scorers import WeightedScorer
from grebe.feed.settings import FeedSettings
from grebe.feed.sources import SimilarPostsSource
from grebe.thunder.store import ThunderStore

from .worlds import random_world


def _candidates(rng: np.random.Generator, n: int, dim: int) -> list[FeedCandidate]:
    return [FeedCandidate(post_id=f"p{i}", author_id=f"u{i % 7}", created_at=1000.0 + i,
                          in_network=bool(i % 2), source="s",
                          embedding=rng.normal(size=dim).astype(np.float32))
            for i in range(n)]


def _row_by_row(query: HomeQuery, candidates: list[FeedCandidate]) -> np.ndarray:
    """The definition: best cosine with the interest vectors, the source's similarity
    (or 0) without a usable embedding, clipped to 0..1."""
    interests = np.asarray(query.interest_vectors, dtype=np.float64)
    out = []
    for c in candidates:
        e = c.embedding
        if e is None or len(e) != interests.shape[1]:
            out.append(c.similarity or 0.0)
            continue
        norm = float(np.linalg.norm(e))
        out.append(float((interests @ np.asarray(e, dtype=np.float64)).max()) / norm
                   if norm else 0.0)
    return np.clip(np.array(out), 0.0, 1.0)


def test_interest_from_one_matrix_equals_row_by_row() -> None:
    rng = np.random.default_rng(4)
    scorer = WeightedScorer(FeedSettings())
    query = HomeQuery(user_id="v", interest_vectors=rng.normal(size=(3, 8)).tolist())
    every = _candidates(rng, 40, 8)
    every[5].embedding = np.zeros(8, dtype=np.float32)  # no direction: 0
    assert np.allclose(scorer.interest(query, every), _row_by_row(query, every), atol=1e-6)
    mixed = _candidates(rng, 40, 8)
    mixed[3].embedding = None
    mixed[3].similarity = 0.4
    mixed[9].embedding = np.ones(5, dtype=np.float32)  # another model's size: not used
    mixed[9].similarity = 0.7
    got = scorer.interest(query, mixed)
    assert np.allclose(got, _row_by_row(query, mixed), atol=1e-6)
    assert got[3] == 0.4 and got[9] == 0.7


def _definition(store: ThunderStore, found: list[list[tuple[str, float]]],
                skip: set[str], k: int) -> list[tuple[str, float]]:
    """Best similarity per post over the searches, most similar first, ties by id,
    skipping the authors in `skip`, the first k."""
    best: dict[str, float] = {}
    for matches in found:
        for post_id, similarity in matches:
            best[post_id] = max(similarity, best.get(post_id, -2.0))
    expected = []
    for post_id, similarity in sorted(best.items(), key=lambda kv: (-kv[1], kv[0])):
        post = store.get(post_id)
        if post is None or post.author_id in skip:
            continue
        expected.append((post_id, similarity))
        if len(expected) == k:
            break
    return expected


async def test_similar_posts_best_similarity_first_ties_by_id() -> None:
    store, index, vectors, _ = random_world(2, posts=400, authors=40,
                                            ties=(slice(20, 30), 10))
    settings = FeedSettings.model_validate({"out_of_network_max": 60, "min_similarity": 0.8,
                              "backfill_min_similarity": 0.0})
    source = SimilarPostsSource(index, store, settings)
    engaged = np.vstack([vectors[10], vectors[200], vectors[300]])
    mean = engaged.mean(axis=0)
    query = HomeQuery(user_id="me", following=["u1", "u2"], seen={"p011", "p250"},
                      interest_vector=(mean / np.linalg.norm(mean)).tolist(),
                      interest_vectors=engaged.tolist())
    got = await source.fetch(query)

    # The definition, from the same searches.
    expected = _definition(store, index.found, {"u1", "u2", "me"}, 60)
    assert [(c.post_id, c.similarity) for c in got] == expected
    assert {c.source for c in got} == {"similar_posts", "similar_posts_backfill"}
    tied = [c.post_id for c in got if c.post_id in {f"p{i:03d}" for i in (10, *range(20, 30))}]
    assert tied == sorted(tied) and len(tied) >= 5


async def test_similar_posts_one_batched_search_when_the_shares_fill_the_page() -> None:
    """The interest mean and the centres of the interest groups (here four unrelated
    vectors: three groups, the oldest left out) are searched in one call, each for an
    equal share of k + k/4; the answer is the definition (best similarity per post,
    most similar first, followed authors skipped) over those searches. Only when the
    shares leave the page short is the mean searched again at the full depth."""
    store, index, vectors, _ = random_world(5, posts=3000, authors=300)
    settings = FeedSettings.model_validate({"out_of_network_max": 40,
                                            "min_similarity": 0.5})
    source = SimilarPostsSource(index, store, settings)
    engaged = vectors[[3, 700, 1400, 2100]]
    mean = engaged.mean(axis=0)
    query = HomeQuery(user_id="me", following=["u1", "u2"], interest_vector=(
        mean / np.linalg.norm(mean)).tolist(), interest_vectors=engaged.tolist())
    got = await source.fetch(query)
    share = max(20, -(-50 // 4))
    assert index.calls == [(4, share)]  # one batched call: the mean and 3 groups at most
    found = index.found
    expected = _definition(store, found, {"u1", "u2", "me"}, 40)
    assert [(c.post_id, c.similarity) for c in got] == expected and len(got) == 40

    # The shares' posts all by followed authors: the page is short, the mean goes deeper.
    index.calls.clear()
    found = list(found)
    query.following = sorted({store.get(pid).author_id  # type: ignore[union-attr]
                              for m in found for pid, _ in m})
    again = await source.fetch(query)
    assert index.calls == [(4, share), (1, 50)]
    assert again and all(c.author_id not in query.following for c in again)


def test_interest_centres_group_similar_vectors_newest_first() -> None:
    """The plain definition on a small case: close vectors share a group whose centre
    is their normalised sum; a new direction opens a group while there is room."""
    from grebe.feed.sources import interest_centres

    a, b, c = np.eye(3)
    a2 = (a + 0.1 * b) / np.linalg.norm(a + 0.1 * b)
    got = interest_centres([a, b, a2, c], threshold=0.5, limit=2)
    expected_a = (a + a2) / np.linalg.norm(a + a2)
    assert np.allclose(got, [expected_a, b], atol=1e-6)  # c: no room, left out
    assert np.allclose(interest_centres([a, b, a2, c], 0.5, 3)[2], c)
    assert interest_centres([], 0.5, 3).size == 0
    assert len(interest_centres([a, a2], 0.5, 3)) == 1


async def test_author_diversity_counts_each_authors_earlier_posts_in_score_order() -> None:
    """The vectorised attenuation equals its definition: in score order (ties by
    position, NaN last), an author's n-th post is multiplied by max(floor, decay**n)."""
    from grebe.feed.scorers import AuthorDiversityScorer

    prng = random.Random(9)
    settings = FeedSettings()
    candidates = _candidates(np.random.default_rng(9), 300, 4)
    for c in candidates:
        c.author_id = f"u{prng.randrange(40)}"
        c.score = float(prng.randrange(50))  # many ties
    candidates[7].score = float("nan")
    got = await AuthorDiversityScorer(settings).score(HomeQuery(user_id="v"), candidates)
    order = sorted(range(300), key=lambda i: (
        1 if np.isnan(candidates[i].score) else 0, -candidates[i].score, i))
    seen: dict[str, int] = {}
    expected = [0.0] * 300
    for i in order:
        k = seen.get(candidates[i].author_id, 0)
        seen[candidates[i].author_id] = k + 1
        expected[i] = max(settings.author_diversity_floor, settings.author_diversity_decay ** k)
    assert got["diversity"] == pytest.approx(expected)


async def test_duplicate_filter_keeps_the_first_of_each_content() -> None:
    from grebe.feed.filters import DuplicateFilter

    prng = random.Random(3)
    candidates = _candidates(np.random.default_rng(3), 200, 4)
    for c in candidates:
        c.post_id = f"p{prng.randrange(120)}"
        c.source_post_id = f"p{prng.randrange(120)}" if prng.random() < 0.3 else None
    kept, removed = await DuplicateFilter().filter(HomeQuery(user_id="v"), candidates)
    firsts: dict[str, FeedCandidate] = {}
    for c in candidates:
        firsts.setdefault(c.content_id, c)
    assert [id(c) for c in kept] == [id(c) for c in firsts.values()]
    assert len(removed) == 200 - len(firsts) > 0


def test_one_blas_thread_ranks_as_einsum() -> None:
    """After `grebe.feed.blas.use_one_thread` (feed-serve, once at start-up) BLAS runs on
    one thread and the interest signal uses `@`; it equals the einsum answer. In a child
    process: the limit is for good, and this test process keeps its BLAS threads."""
    import subprocess
    import sys

    script = """
import numpy as np
from threadpoolctl import threadpool_info
from grebe.feed import blas
from grebe.feed.scorers import _best_cosine
rng = np.random.default_rng(2)
m = rng.normal(size=(1500, 384)).astype(np.float32)
m[7] = 0.0
interests = rng.normal(size=(6, 384)).astype(np.float32)
before = _best_cosine(m, interests)
assert not blas.one_thread()
blas.use_one_thread()
assert blas.one_thread()
assert all(i["num_threads"] == 1 for i in threadpool_info() if i["user_api"] == "blas")
after = _best_cosine(m, interests)
assert np.allclose(before, after, atol=1e-5) and after[7] == 0.0
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_page_explained_at_once_equals_each_post_explained_plainly() -> None:
    """explain_page rounds a page's numbers in one numpy pass; the definition rounds
    each with Python's round, post by post."""
    from grebe.feed.home import explain_page

    prng = random.Random(7)
    served = []
    for i in range(50):
        c = FeedCandidate(post_id=f"p{i}", author_id="a", created_at=0.0,
                          in_network=bool(i % 2), source="thunder", score=prng.uniform(0, 4))
        c.signals = {name: prng.random() for name in ("interest", "recency", "quality")}
        c.score_parts = {name: 0.3 * v for name, v in c.signals.items()}
        if i % 5:  # a post ranked without the diversity scorer has no factor
            c.score_parts["author_diversity"] = prng.choice([1.0, 0.6, 0.36])
        served.append(c)
    filters = ["duplicate", "seen"]
    expected = [{
        "source": c.source, "in_network": c.in_network, "filters_passed": filters,
        "signals": {k: round(v, 6) for k, v in c.signals.items()},
        "contributions": {k: round(v, 6) for k, v in c.score_parts.items()
                          if k != "author_diversity"},
        "author_diversity": round(c.score_parts.get("author_diversity", 1.0), 6),
        "score": round(c.score, 6),
    } for c in served]
    assert explain_page(served, filters) == expected


def test_sums_and_best_cosines_down_the_long_axis_are_the_same_numbers() -> None:
    """The ranker adds signal columns one by one and takes each row's best cosine from
    the transposed products: exactly the numbers of numpy's row sum and row max."""
    from grebe.feed import blas
    from grebe.feed.scorers import _best_cosine, weighted_sum

    prng = np.random.default_rng(5)
    for n in (1, 7, 1500):
        signals, weights = prng.random((n, 5)), prng.random(5) * 3
        assert np.array_equal(weighted_sum(signals, weights), (signals * weights).sum(axis=1))
        matrix = prng.standard_normal((n, 16)).astype(np.float32)
        matrix[0] = 0.0  # a zero row: 0
        for k in (1, 2, 6):
            interests = prng.standard_normal((k, 16)).astype(np.float32)
            norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))
            products = matrix @ interests.T if blas.one_thread() \
                else np.einsum("ij,kj->ik", matrix, interests)
            plain = products.max(axis=1)
            expected = np.where(norms > 0, plain / np.where(norms > 0, norms, 1.0), 0.0)
            assert np.array_equal(_best_cosine(matrix, interests), expected)


def test_a_ranked_page_explained_in_one_pass_equals_the_three_passes() -> None:
    """explain_ranked fills signals, score_parts and explanation from the ranker's
    matrix at once; the definition builds each post's signals dict, then its
    contributions (weight x value, the diversity factor), then explain_page."""
    from grebe.feed.home import explain_page, explain_ranked
    from grebe.feed.scorers import SIGNALS, contributions

    settings = FeedSettings()
    weights = WeightedScorer(settings).weights()
    prng = random.Random(11)
    matrix = np.array([[prng.random() for _ in SIGNALS] for _ in range(50)])

    def page() -> list[FeedCandidate]:
        return [FeedCandidate(post_id=f"p{i}", author_id=f"a{i % 7}", created_at=0.0,
                              in_network=bool(i % 2), source="thunder",
                              score=prng.uniform(0, 4), diversity=prng.choice([1.0, 0.6]))
                for i in range(50)]

    plain, fast = page(), page()
    for a, b in zip(plain, fast, strict=True):
        b.score, b.diversity = a.score, a.diversity
    for candidate, row in zip(plain, matrix.tolist(), strict=True):
        candidate.signals = dict(zip(SIGNALS, row, strict=True))
        candidate.score_parts = contributions(candidate, settings)
    expected = explain_page(plain, ["duplicate", "seen"])
    explain_ranked(fast, ["duplicate", "seen"], matrix, weights)
    for a, b, why in zip(plain, fast, expected, strict=True):
        assert b.signals == a.signals
        assert b.score_parts == a.score_parts  # the very floats, not only rounded
        assert b.explanation == why


async def test_interest_vectors_as_arrays_or_lists_give_the_same_answers() -> None:
    """The interest hydrator hands the vectors on as float32 arrays; a caller may give
    lists: the interest signal, the searches and the posts found are the same."""
    store, index, vectors, _ = random_world(5, posts=3000, authors=300)
    settings = FeedSettings.model_validate({"out_of_network_max": 40,
                                            "min_similarity": 0.5})
    engaged = vectors[[3, 700, 1400]].astype(np.float32)
    mean = engaged.mean(axis=0)
    unit = mean / np.linalg.norm(mean)
    as_lists = HomeQuery(user_id="me", following=["u1"], interest_vector=unit.tolist(),
                         interest_vectors=engaged.tolist())
    as_arrays = HomeQuery(user_id="me", following=["u1"], interest_vector=unit,
                          interest_vectors=engaged)
    pages = []
    for query in (as_lists, as_arrays):
        source = SimilarPostsSource(index, store, settings)  # nothing kept between them
        pages.append([(c.post_id, c.similarity) for c in await source.fetch(query)])
    assert pages[0] == pages[1] and len(pages[0]) == 40
    assert index.calls[0] == index.calls[1]
    scorer = WeightedScorer(settings)
    rng = np.random.default_rng(1)
    candidates = _candidates(rng, 30, engaged.shape[1])
    assert np.array_equal(scorer.interest(as_lists, candidates),
                          scorer.interest(as_arrays, candidates))
    only_mean = HomeQuery(user_id="me", interest_vector=unit)  # no vectors: the mean
    assert np.array_equal(scorer.interest(only_mean, candidates), scorer.interest(
        HomeQuery(user_id="me", interest_vectors=[unit.tolist()]), candidates))
