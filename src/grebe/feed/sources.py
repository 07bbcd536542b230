"""Candidate sources of the home timeline: in-network (thunder) and out-of-network
(nearest neighbours of the viewer's interest vector among recent posts)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter

import numpy as np

from grebe.feed.ann import PostANNIndex
from grebe.feed.candidates import FeedCandidate, HomeQuery, assign_candidate, candidate_row
from grebe.feed.frame import CandidateFrame, as_column
from grebe.feed.neighbourhood import (
    Adopted,
    Neighbourhood,
    NeighbourhoodCache,
    NeighbourhoodKey,
    PostLookup,
)
from grebe.feed.settings import FeedSettings
from grebe.thunder.client import InNetworkPostsClient
from grebe.thunder.store import InNetworkQuery, LightPost, ThunderStore


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
_POST_FIELD = {name: attrgetter(name) for name in POST_COLUMNS}


def post_columns(posts: Sequence[LightPost]) -> dict[str, np.ndarray]:
    """The posts' attributes (POST_COLUMNS) as arrays: one `map` in C per column
    instead of an object per post. A pass per column, not one tuple per post
    transposed: ~1,000 posts in 0.39 ms against 0.57 (one-off micro-benchmark, cold
    posts, docs/benchmarks.md "Fewer objects per request")."""
    n = len(posts)
    return {name: np.fromiter(map(get, posts), dtype=np.float64 if name == "created_at"
                              else object, count=n)
            for name, get in _POST_FIELD.items()}


def candidate_frame(posts: Sequence[LightPost], *, in_network: bool,
                    sources: Sequence[str] | str,
                    similarity: Sequence[float] | None = None
                    ) -> CandidateFrame[FeedCandidate]:
    """The posts as one candidate frame: what `candidate` builds per post, as columns.
    `sources` is one name for all or one per post; a missing similarity is NaN (None
    on the built candidate)."""
    return frame_of(post_columns(posts), in_network=in_network, sources=sources,
                    similarity=similarity)


def frame_of(columns: dict[str, np.ndarray], *, in_network: bool,
             sources: Sequence[str] | str | np.ndarray,
             similarity: Sequence[float] | np.ndarray | None = None
             ) -> CandidateFrame[FeedCandidate]:
    """A candidate frame of post columns (`post_columns`) and what the source adds."""
    n = len(columns["post_id"])
    columns = dict(columns)
    columns["in_network"] = np.full(n, in_network)
    columns["source"] = np.full(n, sources, dtype=object) if isinstance(sources, str) \
        else as_column(sources)
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
    `BACKFILL_SOURCE`, so the feed keeps filling.

    What the searches found is kept per viewer and interest queries for
    `neighbourhood_cache_s` (grebe.feed.neighbourhood): a returning viewer's request
    picks from it, leaving out what they have seen, engaged with or follow by now and
    posts no longer held, and searches again only when that has eaten more than a
    quarter of what the search gave while the index may hold more.

    `on_search`, when set, is given each neighbourhood a search found (feed-serve's
    workers send it to each other, grebe.feed.replication), and `adopt` keeps one
    found elsewhere: a viewer's searches, the largest part of a first request, are
    then made by one worker, not by each."""

    name = "similar_posts"

    def __init__(self, index: PostANNIndex, posts: PostLookup, settings: FeedSettings,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.index = index
        self.posts = posts
        self.settings = settings
        self.neighbourhoods = NeighbourhoodCache(
            settings.neighbourhood_cache_s, settings.neighbourhood_cache_viewers, clock)
        # ThunderStore.get is a Python method over its dict: the dict's own get gives the
        # same answer mapped in C (~1,000 lookups per request).
        self._get = posts.by_id.get if isinstance(posts, ThunderStore) else posts.get
        self.on_search: Callable[[NeighbourhoodKey, Neighbourhood], None] | None = None

    def enable(self, query: HomeQuery) -> bool:
        return query.interest_vector is not None and self.settings.out_of_network_max > 0

    async def fetch(self, query: HomeQuery) -> CandidateFrame[FeedCandidate]:
        s = self.settings
        k = s.out_of_network_max
        if query.interest_vector is None or not k:
            return candidate_frame([], in_network=False, sources=self.name)
        centres = interest_centres(query.interest_vectors, s.interest_group_similarity,
                                   s.interest_queries)
        mean = np.asarray(query.interest_vector, dtype=np.float32)[None, :]
        queries = np.concatenate([mean, centres]) if len(centres) > 1 else mean
        engaged = set(query.engaged)
        authors = set(query.following)
        authors.add(query.user_id)
        key = (query.user_id, queries.tobytes())

        def pick(hood: Neighbourhood) -> np.ndarray:
            return hood.pick(k, get=self._get, exclude=(query.seen, engaged),
                             authors=authors)

        hood = self._kept(key)
        chosen = pick(hood) if hood is not None else np.empty(0, dtype=np.intp)
        if hood is None or hood.stale(len(chosen), k):
            hood = self._search(query, queries, k, pick)
            chosen = pick(hood)
            hood.filled = len(chosen)
            self.neighbourhoods.put(key, hood)
            if self.on_search is not None:
                self.on_search(key, hood)
        similarity = hood.similarity[chosen]
        return frame_of({name: column[chosen] for name, column in hood.columns.items()},
                        in_network=False, similarity=similarity,
                        sources=np.where(similarity >= s.min_similarity, self.name,
                                         BACKFILL_SOURCE).astype(object))

    def adopt(self, key: NeighbourhoodKey, post_ids: Sequence[str],
              similarity: Sequence[float], *, more: bool, filled: int) -> None:
        """Keep a neighbourhood another worker's search found (its posts and their
        similarities, `more` and `filled` as that search set them) as if searched here:
        posts this process does not hold are left out, as after a search. It is built
        when this worker first serves the viewer (`Adopted`)."""
        self.neighbourhoods.put(key, Adopted(post_ids, similarity, more, filled))

    def _kept(self, key: NeighbourhoodKey) -> Neighbourhood | None:
        """The viewer's kept neighbourhood, built here first if another worker found it."""
        kept = self.neighbourhoods.get(key)
        if not isinstance(kept, Adopted):
            return kept
        if kept.hood is None:
            kept.hood = self._neighbourhood(
                [zip(kept.post_ids, kept.similarity, strict=True)], kept.more)
            kept.hood.filled = kept.filled
        return kept.hood

    def _search(self, query: HomeQuery, queries: np.ndarray, k: int,
                pick: Callable[[Neighbourhood], np.ndarray]) -> Neighbourhood:
        """Search the index near the interest queries, each for an equal share of a
        quarter more than k (followed authors' posts are skipped; seen posts are
        skipped by the index on top of it); the interest mean again at the full depth
        when the shares leave fewer than k posts to serve."""
        exclude = query.seen.union(query.engaged)
        depth = k + k // 4
        share = max(MIN_PER_QUERY, -(-depth // len(queries)))
        found = self.index.search_many(queries, share, exclude)
        more = any(len(f) == share for f in found)  # a full answer: there may be more
        hood = self._neighbourhood(found, more)
        if len(pick(hood)) < k and more and share < depth:
            deeper = self.index.search(queries[0], depth, exclude)
            found.append(deeper)
            hood = self._neighbourhood(found, len(deeper) == depth)
        return hood

    def _neighbourhood(self, found: Iterable[Iterable[tuple[str, float]]], more: bool
                       ) -> Neighbourhood:
        return Neighbourhood(found, self._get, self.settings.backfill_min_similarity,
                             more, post_columns)


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
