"""Candidate sources of the home timeline: in-network (thunder) and out-of-network
(nearest neighbours of the viewer's interest vector among recent posts)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Protocol

import numpy as np

from grebe.feed.ann import PostANNIndex
from grebe.feed.candidates import FeedCandidate, HomeQuery, assign_candidate, candidate_row
from grebe.feed.frame import CandidateFrame
from grebe.feed.settings import FeedSettings
from grebe.thunder.client import InNetworkPostsClient
from grebe.thunder.store import InNetworkQuery, LightPost


class PostLookup(Protocol):
    """Recent posts by id (a ThunderStore is one): deleted or expired ones are absent."""

    def get(self, post_id: str) -> LightPost | None: ...


def candidate(post: LightPost, *, in_network: bool, source: str,
              similarity: float | None = None) -> FeedCandidate:
    return FeedCandidate(
        post_id=post.post_id, author_id=post.author_id, created_at=post.created_at,
        in_network=in_network, source=source, source_post_id=post.source_post_id,
        source_author_id=post.source_author_id, in_reply_to_post_id=post.in_reply_to_post_id,
        similarity=similarity,
    )


#: The post attributes a candidate frame starts with (LightPost's names).
POST_COLUMNS = ("post_id", "author_id", "created_at", "source_post_id", "source_author_id",
                "in_reply_to_post_id")
_POST_FIELDS = attrgetter(*POST_COLUMNS)


def candidate_frame(posts: Sequence[LightPost], *, in_network: bool,
                    sources: Sequence[str] | str,
                    similarity: Sequence[float] | None = None
                    ) -> CandidateFrame[FeedCandidate]:
    """The posts as one candidate frame: what `candidate` builds per post, as columns
    (one transposition in C instead of an object per post). `sources` is one name for
    all or one per post; a missing similarity is NaN (None on the built candidate)."""
    n = len(posts)
    rows = list(zip(*map(_POST_FIELDS, posts), strict=True)) if n else [()] * 6
    columns: dict[str, Sequence[object] | np.ndarray] = dict(zip(POST_COLUMNS, rows,
                                                                  strict=True))
    columns["created_at"] = np.fromiter(columns["created_at"], dtype=np.float64, count=n)
    columns["in_network"] = np.full(n, in_network)
    columns["source"] = [sources] * n if isinstance(sources, str) else sources
    columns["similarity"] = np.full(n, np.nan) if similarity is None \
        else np.asarray(similarity, dtype=np.float64)
    return CandidateFrame.from_columns(columns, candidate_row, assign_candidate)


class InNetworkSource:
    name = "thunder"

    def __init__(self, client: InNetworkPostsClient, settings: FeedSettings) -> None:
        self.client = client
        self.settings = settings

    async def fetch(self, query: HomeQuery) -> CandidateFrame[FeedCandidate]:
        if not query.following or not self.settings.in_network_max:
            return candidate_frame([], in_network=True, sources=self.name)
        result = await self.client.get_in_network_posts(InNetworkQuery(
            user_id=query.user_id,
            following_user_ids=query.following,
            exclude_post_ids=query.seen,
            max_results=self.settings.in_network_max,
            budget_s=self.settings.thunder_budget_ms / 1000.0,
        ))
        return candidate_frame(result.posts, in_network=True, sources=self.name)


class SimilarPostsSource:
    """Posts near the viewer's interests from authors they do not follow.

    It searches near the interest mean and, when the viewer's interest vectors fall in
    several groups of similar ones, near the centre of each group (at most
    `interest_queries` groups, `interest_centres`): a viewer into jazz and football
    finds both, where the mean may sit between them; a viewer with one interest costs
    one search. All in one batched call, each for an equal share of the neighbourhood
    wanted, keeping each post's best cosine. A search costs about the same whatever its
    depth up to a few hundred (it is memory-bound: each starts in a cold part of the
    graph, docs/benchmarks.md), so the number of searches is what to keep small. Only
    when the shares leave fewer than `out_of_network_max` posts is the interest mean
    searched again at the full depth.

    Posts at or above `min_similarity` come first; when fewer than `out_of_network_max`
    do (the viewer has seen the close ones), less similar ones down to
    `backfill_min_similarity` fill the rest, tagged
    `BACKFILL_SOURCE`, so the feed keeps filling."""

    name = "similar_posts"

    def __init__(self, index: PostANNIndex, posts: PostLookup, settings: FeedSettings) -> None:
        self.index = index
        self.posts = posts
        self.settings = settings

    def enable(self, query: HomeQuery) -> bool:
        return query.interest_vector is not None and self.settings.out_of_network_max > 0

    async def fetch(self, query: HomeQuery) -> CandidateFrame[FeedCandidate]:
        s = self.settings
        k = s.out_of_network_max
        if query.interest_vector is None or not k:
            return candidate_frame([], in_network=False, sources=self.name)
        exclude = query.seen.union(query.engaged)
        centres = interest_centres(query.interest_vectors, s.interest_group_similarity,
                                   s.interest_queries)
        mean = np.asarray([query.interest_vector], dtype=np.float32)
        queries = np.concatenate([mean, centres]) if len(centres) > 1 else mean
        # A quarter more than k in all (followed authors' posts are skipped; seen posts
        # are skipped by the index on top of it), an equal share per query.
        depth = k + k // 4
        share = max(MIN_PER_QUERY, -(-depth // len(queries)))
        found = self.index.search_many(queries, share, exclude)
        close, backfill = self._merge(query, found)
        if len(close) + len(backfill) < k and share < depth \
                and any(len(f) == share for f in found):  # there may be more
            found.append(self.index.search(query.interest_vector, depth, exclude))
            close, backfill = self._merge(query, found)
        return candidate_frame(
            [p for p, _ in chain(close, backfill)], in_network=False,
            sources=[self.name] * len(close) + [BACKFILL_SOURCE] * len(backfill),
            similarity=[sim for _, sim in chain(close, backfill)])

    def _merge(self, query: HomeQuery, found: list[list[tuple[str, float]]]
               ) -> tuple[list[tuple[LightPost, float]], list[tuple[LightPost, float]]]:
        """(close, backfill): the posts found, each at its best similarity, most similar
        first, up to `out_of_network_max`, without followed authors' or the viewer's."""
        s = self.settings
        k = s.out_of_network_max
        followed = set(query.following)
        # Every (post id, similarity) found, most similar first, equal similarities in
        # id order: two sorts in C (the second is stable) instead of a merge into a dict
        # and a sort by a Python key. A post found by several searches is taken at its
        # first (best) occurrence.
        pairs = list(chain.from_iterable(found))
        pairs.sort()
        pairs.sort(key=_SIMILARITY, reverse=True)
        taken: set[str] = set()
        close: list[tuple[LightPost, float]] = []
        backfill: list[tuple[LightPost, float]] = []
        get = self.posts.get
        for post_id, similarity in pairs:
            if post_id in taken:
                continue
            taken.add(post_id)
            if similarity < s.backfill_min_similarity or len(close) + len(backfill) == k:
                break
            post = get(post_id)
            if post is None or post.author_id in followed or post.author_id == query.user_id:
                continue
            (close if similarity >= s.min_similarity else backfill).append((post, similarity))
        return close, backfill


def interest_centres(vectors: Sequence[Sequence[float]], threshold: float,
                     limit: int) -> np.ndarray:
    """Unit centres of groups of similar vectors, at most `limit` groups: in order, each
    vector joins the group whose centre it is closest to when that cosine reaches
    `threshold`, else starts a group while there is room, else is left out (the
    newest interests come first, so the oldest give way)."""
    if not len(vectors) or limit <= 0:
        return np.empty((0, 0), dtype=np.float32)
    units = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(units, axis=1)
    units = units[norms > 0] / norms[norms > 0, None]
    sums: list[np.ndarray] = []
    for unit in units:
        if sums:
            centres = np.array([v / np.linalg.norm(v) for v in sums])
            best = int(np.argmax(np.einsum("ij,j->i", centres, unit)))
            if float(centres[best] @ unit) >= threshold:
                sums[best] = sums[best] + unit
                continue
        if len(sums) < limit:
            sums.append(unit.copy())
    return np.array([v / np.linalg.norm(v) for v in sums], dtype=np.float32)


BACKFILL_SOURCE = "similar_posts_backfill"
MIN_PER_QUERY = 20  # neighbours asked of each query's search, at least
_SIMILARITY = itemgetter(1)
