"""Candidates as columns (issue 13, feed CPU): every home component given a
`CandidateFrame` answers as it does given the plain list of `FeedCandidate`s, and the
frame behaves like shared mutable objects (a value set on a view is seen through every
view, rows are built once, unset attributes keep their defaults)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from grebe.feed.candidates import FeedCandidate, HomeQuery
from grebe.feed.components import Columns, apply_patches
from grebe.feed.features import LABEL_SET
from grebe.feed.filters import DuplicateFilter, MutedAuthorFilter, SafetyFilter, SeenFilter
from grebe.feed.frame import CandidateFrame, column
from grebe.feed.home import TopKSelector
from grebe.feed.labels import LABEL_SETS_LIMIT, NO_CODE, LabelSets
from grebe.feed.pipeline import CandidatePipeline
from grebe.feed.scorers import AuthorDiversityScorer, WeightedScorer
from grebe.feed.settings import FeedSettings
from grebe.feed.sources import candidate, candidate_frame
from grebe.thunder.records import LightPost

DIM = 8


def _posts(prng: random.Random, n: int) -> list[LightPost]:
    posts = []
    for i in range(n):
        retweet = prng.random() < 0.2
        posts.append(LightPost(
            post_id=f"p{i}", author_id=f"u{prng.randrange(12)}",
            created_at=1000.0 + prng.randrange(500),
            source_post_id=f"p{prng.randrange(n)}" if retweet else None,
            source_author_id=f"u{prng.randrange(12)}" if retweet else None,
            in_reply_to_post_id=f"p{prng.randrange(n)}" if prng.random() < 0.1 else None))
    return posts


def _features(rng: np.random.Generator, prng: random.Random, n: int) -> Columns:
    labels = [["nsfw"] if prng.random() < 0.1 else ["safe"] for _ in range(n)]
    scores = [{"quality": prng.random()} if prng.random() < 0.7 else {} for _ in range(n)]
    embeddings = [rng.normal(size=DIM).astype(np.float32) for _ in range(n)]
    return Columns(labels=labels, scores=scores, embedding=embeddings)


def _both(seed: int, n: int = 120, *, matrix: bool = False
          ) -> tuple[list[FeedCandidate], CandidateFrame[FeedCandidate], HomeQuery]:
    """The same candidates as objects (the definition) and as a frame; with `matrix`,
    the frame gets the embeddings as one n x DIM matrix, as the feature table gives
    them (grebe.feed.features), the objects one array each."""
    prng, rng = random.Random(seed), np.random.default_rng(seed)
    posts = _posts(prng, n)
    half = n // 2
    similarity = [prng.uniform(-0.2, 0.9) for _ in posts[half:]]
    objects = [candidate(p, in_network=True, source="thunder") for p in posts[:half]] + [
        candidate(p, in_network=False, source="similar_posts", similarity=s)
        for p, s in zip(posts[half:], similarity, strict=True)]
    frame = CandidateFrame.concat([
        candidate_frame(posts[:half], in_network=True, sources="thunder"),
        candidate_frame(posts[half:], in_network=False, sources="similar_posts",
                        similarity=similarity)])
    features = _features(rng, prng, n)
    apply_patches(objects, features)
    if matrix:
        features = Columns(features, embedding=np.stack(features["embedding"]))
    apply_patches(frame, features)
    query = HomeQuery(user_id="me", now=1600.0, seen={f"p{i}" for i in range(0, n, 9)},
                      engaged=["p3"], muted={"u1", "u5"},
                      interest_vectors=rng.normal(size=(3, DIM)).tolist())
    return objects, frame, query


def _ids(candidates: object) -> list[str]:
    return [c.post_id for c in candidates]  # type: ignore[attr-defined]


def test_frame_rows_equal_candidates_built_one_by_one() -> None:
    objects, frame, _ = _both(1)
    assert len(frame) == len(objects)
    assert list(frame) == objects  # every attribute, similarity None where unmeasured
    assert frame[0].similarity is None and frame[-1].similarity is not None


@pytest.mark.parametrize("flt", [DuplicateFilter(), SeenFilter(), MutedAuthorFilter(),
                                 SafetyFilter(FeedSettings())], ids=lambda f: f.name)
async def test_filters_split_a_frame_as_they_split_the_list(flt: object) -> None:
    objects, frame, query = _both(2)
    kept, removed = await flt.filter(query, objects)  # type: ignore[attr-defined]
    fkept, fremoved = await flt.filter(query, frame)  # type: ignore[attr-defined]
    assert isinstance(fkept, CandidateFrame) and isinstance(fremoved, CandidateFrame)
    assert _ids(fkept) == _ids(kept) and _ids(fremoved) == _ids(removed)
    assert removed and kept  # the data exercises each filter


@pytest.mark.parametrize("limit", [LABEL_SETS_LIMIT, 1], ids=["coded", "past-limit"])
async def test_safety_by_label_set_codes_splits_as_by_labels(limit: int) -> None:
    """The safety filter reads a frame's label-set codes (grebe.feed.labels) where the
    feature table gave them: the split is the one the labels give, for a strict and a
    default viewer, also for rows past the codes' limit (NO_CODE: their labels are
    read); the codes column never reaches the built objects."""
    objects, frame, query = _both(7)
    sets = LabelSets(limit)
    codes = [sets.code(labels) for labels in column(frame, "labels")]
    assert (NO_CODE in codes) is (limit == 1)
    apply_patches(frame, Columns({LABEL_SET: np.array(codes, dtype=np.int32)}))
    for level in ("strict", "default", "off"):
        query.safety_level = level
        kept, removed = await SafetyFilter(FeedSettings()).filter(query, objects)
        fkept, fremoved = await SafetyFilter(FeedSettings(), sets).filter(query, frame)
        assert _ids(fkept) == _ids(kept) and _ids(fremoved) == _ids(removed), level
        assert removed or level == "off"
    assert list(frame) == objects  # built without the hidden column


@pytest.mark.parametrize("matrix", [False, True], ids=["arrays", "matrix"])
async def test_scorers_and_selector_on_a_frame_equal_the_list(matrix: bool) -> None:
    settings = FeedSettings()
    objects, frame, query = _both(3, matrix=matrix)
    for scorer in (WeightedScorer(settings), AuthorDiversityScorer(settings)):
        plain = await scorer.score(query, objects)
        columns = await scorer.score(query, frame)
        for key, values in plain.items():
            assert np.allclose(np.asarray(columns[key], dtype=float), values), key
        apply_patches(objects, plain)
        apply_patches(frame, columns)
    # A tie and a NaN: the selector's order must still match.
    for candidates in (objects, frame):
        scores = np.array(column(candidates, "score"), dtype=float)
        scores[7], scores[11] = scores[5], math.nan
        apply_patches(candidates, Columns(score=scores.tolist()))
    selector = TopKSelector()
    query.max_results = 25
    plain_page = await selector.select(query, objects)
    frame_page = await selector.select(query, frame)
    assert _ids(frame_page) == _ids(plain_page)
    assert [c.score for c in frame_page] == [c.score for c in plain_page]
    assert all(type(c.score) is float for c in frame_page)  # plain floats, JSON-able


def test_a_value_set_on_a_view_is_seen_through_every_view() -> None:
    _, frame, _ = _both(4, n=10)
    kept, removed = frame.split([i % 3 == 0 for i in range(10)])
    first = removed[0]  # built now, before the kept rows are scored
    kept.set("score", np.arange(len(kept), dtype=float))
    assert [c.score for c in frame if c in list(kept)] == list(range(len(kept)))
    assert first.score == 0.0 and frame[0] is first  # built once; default kept
    page = kept.take([2, 0])
    page.set("diversity", [0.5, 0.25])
    built = list(page)
    assert [c.diversity for c in built] == [0.5, 0.25]
    assert kept[0] is built[1] and kept[1].diversity == 1.0  # never set: the default
    kept.set("score", np.full(len(kept), 9.0))  # after building: the objects follow
    assert built[0].score == 9.0
    with pytest.raises(ValueError):
        kept.set("score", [1.0])


class _FrameSource:
    name = "frame_source"

    def __init__(self, frame: CandidateFrame[FeedCandidate]) -> None:
        self.frame = frame

    async def fetch(self, query: HomeQuery) -> CandidateFrame[FeedCandidate]:
        return self.frame


class _ListSource:
    name = "list_source"

    def __init__(self, objects: list[FeedCandidate]) -> None:
        self.objects = objects

    async def fetch(self, query: HomeQuery) -> list[FeedCandidate]:
        return self.objects


@pytest.mark.parametrize("matrix", [False, True], ids=["arrays", "matrix"])
async def test_pipeline_on_frames_answers_as_on_objects(matrix: bool) -> None:
    settings = FeedSettings()
    objects, frame, query = _both(5, matrix=matrix)
    answers = []
    for source in (_ListSource(objects), _FrameSource(frame)):
        pipeline: CandidatePipeline[HomeQuery, FeedCandidate] = CandidatePipeline(
            sources=[source],
            filters=[DuplicateFilter(), SeenFilter(), MutedAuthorFilter(),
                     SafetyFilter(settings)],
            scorers=[WeightedScorer(settings), AuthorDiversityScorer(settings)],
            selector=TopKSelector())
        answers.append(await pipeline.run(query))
    plain, columns = answers
    assert columns.errors == {} == plain.errors
    assert isinstance(columns.retrieved, CandidateFrame)
    assert _ids(columns.selected) == _ids(plain.selected)
    assert [c.score for c in columns.selected] == pytest.approx(
        [c.score for c in plain.selected])
    assert [(f.candidate.post_id, f.filter) for f in columns.filtered] == \
        [(f.candidate.post_id, f.filter) for f in plain.filtered]
    # retrieved shows what later stages gave each row, as shared objects did
    assert [c.score for c in columns.retrieved] == pytest.approx(
        [c.score for c in plain.retrieved])


class _PatchHydrator:
    """A hydrator of the plain kind: one patch dict per candidate, keys varying."""

    name = "patches"

    async def hydrate(self, query: HomeQuery, candidates: object) -> list[dict[str, object]]:
        return [{"labels": ["odd"]} if i % 2 else {"labels": ["even"], "diversity": 0.5}
                for i in range(len(candidates))]  # type: ignore[arg-type]


async def test_patch_dicts_and_a_list_source_beside_a_frame_source() -> None:
    """A hydrator returning dicts works on a frame (each key set on the rows that have
    it); a list source beside a frame source gives a list (the frame's rows built)."""
    objects, frame, query = _both(6, n=20)
    answers = []
    for sources in ([_ListSource(objects[:10]), _ListSource(objects[10:])],
                    [_FrameSource(frame.take(range(10))), _ListSource(objects[10:])],
                    [_FrameSource(frame.take(range(10))),
                     _FrameSource(frame.take(range(10, 20)))]):
        pipeline: CandidatePipeline[HomeQuery, FeedCandidate] = CandidatePipeline(
            sources=sources, hydrators=[_PatchHydrator()], selector=TopKSelector())
        answers.append(await pipeline.run(query))
    plain, mixed, columns = answers
    assert isinstance(mixed.retrieved, list) and isinstance(columns.retrieved, CandidateFrame)
    for result in (mixed, columns):
        assert result.errors == {}
        assert [(c.post_id, c.labels, c.diversity) for c in result.retrieved] == \
            [(c.post_id, c.labels, c.diversity) for c in plain.retrieved]


def test_joined_views_keep_which_rows_have_a_column() -> None:
    _, frame, _ = _both(7, n=6)
    frame.take([1, 4]).set("diversity", [0.5, 0.25])
    joined = CandidateFrame.concat([frame.take([4, 0]), frame.take([1])])
    assert [c.diversity for c in joined] == [0.25, 1.0, 0.5]  # row 0: never set
    assert not joined.has("diversity") and joined.take([0, 2]).has("diversity")


def test_a_column_of_vectors_gives_each_row_its_vector() -> None:
    """The embeddings as one matrix (a 2-d column): views and built rows see each row's
    vector; set on a view, joined with a frame holding them as objects, or replaced by
    vectors of another length, every row keeps its own."""
    objects, frame, _ = _both(8, n=12, matrix=True)
    assert frame.column("embedding").shape == (12, DIM)
    kept, removed = frame.split([i % 4 == 0 for i in range(12)])
    assert kept.column("embedding").shape == (9, DIM)
    for c, o in zip(frame, objects, strict=True):
        assert isinstance(c.embedding, np.ndarray) and np.array_equal(c.embedding, o.embedding)
    removed.set("embedding", np.zeros((3, DIM), dtype=np.float32))  # rows built: updated
    assert not frame[4].embedding.any() and np.array_equal(frame[5].embedding,
                                                          objects[5].embedding)
    kept.take([0]).set("embedding", np.ones((1, 3), dtype=np.float32))  # another length
    assert list(frame[1].embedding) == [1.0, 1.0, 1.0]
    assert np.array_equal(frame[2].embedding, objects[2].embedding)
    _, other, _ = _both(8, n=4)  # embeddings as one array per row (an object column)
    joined = CandidateFrame.concat([other, frame.take([2, 4])])
    assert [len(c.embedding) for c in joined] == [DIM] * 6
    assert np.array_equal(joined[4].embedding, objects[2].embedding)
