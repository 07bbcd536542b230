"""Candidate sources of the home timeline: in-network (thunder) and out-of-network
(nearest neighbours of the viewer's interest vector among recent posts)."""

from __future__ import annotations

from itertools import chain
from operator import itemgetter
from typing import Protocol

from grebe.feed.ann import PostANNIndex
from grebe.feed.candidates import FeedCandidate, HomeQuery
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


class InNetworkSource:
    name = "thunder"

    def __init__(self, client: InNetworkPostsClient, settings: FeedSettings) -> None:
        self.client = client
        self.settings = settings

    async def fetch(self, query: HomeQuery) -> list[FeedCandidate]:
        if not query.following or not self.settings.in_network_max:
            return []
        result = await self.client.get_in_network_posts(InNetworkQuery(
            user_id=query.user_id,
            following_user_ids=query.following,
            exclude_post_ids=query.seen,
            max_results=self.settings.in_network_max,
            budget_s=self.settings.thunder_budget_ms / 1000.0,
        ))
        return [candidate(p, in_network=True, source=self.name) for p in result.posts]


class SimilarPostsSource:
    """Posts near the viewer's interests from authors they do not follow.

    It searches near the interest mean and near each of the newest `interest_queries`
    interest vectors (a viewer into jazz and football finds both, where the mean may sit
    between them), keeping each post's best cosine. Posts at or above `min_similarity`
    come first; when fewer than `out_of_network_max` do (the viewer has seen the close
    ones), less similar ones down to `backfill_min_similarity` fill the rest, tagged
    `BACKFILL_SOURCE`, so the feed keeps filling."""

    name = "similar_posts"

    def __init__(self, index: PostANNIndex, posts: PostLookup, settings: FeedSettings) -> None:
        self.index = index
        self.posts = posts
        self.settings = settings

    def enable(self, query: HomeQuery) -> bool:
        return query.interest_vector is not None and self.settings.out_of_network_max > 0

    async def fetch(self, query: HomeQuery) -> list[FeedCandidate]:
        s = self.settings
        k = s.out_of_network_max
        if query.interest_vector is None or not k:
            return []
        followed = set(query.following)
        # Ask for more than k: followed authors' and the viewer's own posts are skipped.
        exclude = query.seen.union(query.engaged)
        extra = query.interest_vectors[: s.interest_queries]
        # The mean's neighbourhood in full (a quarter more than k: followed authors'
        # posts are skipped); each engaged post's in a share of it, all in one batched
        # search (the search cost grows with the depth; seen posts are skipped by the
        # index on top of it).
        depth = k + k // 4
        found = [self.index.search(query.interest_vector, depth, exclude)]
        if extra:
            found += self.index.search_many(
                extra, max(MIN_PER_QUERY, depth // (len(extra) + 1)), exclude)
        # Every (post id, similarity) found, most similar first, equal similarities in
        # id order: two sorts in C (the second is stable) instead of a merge into a dict
        # and a sort by a Python key. A post found by several searches is taken at its
        # first (best) occurrence.
        pairs = list(chain.from_iterable(found))
        pairs.sort()
        pairs.sort(key=_SIMILARITY, reverse=True)
        taken: set[str] = set()
        close: list[FeedCandidate] = []
        backfill: list[FeedCandidate] = []
        for post_id, similarity in pairs:
            if post_id in taken:
                continue
            taken.add(post_id)
            if similarity < s.backfill_min_similarity or len(close) + len(backfill) == k:
                break
            post = self.posts.get(post_id)
            if post is None or post.author_id in followed or post.author_id == query.user_id:
                continue
            if similarity >= s.min_similarity:
                close.append(candidate(post, in_network=False, source=self.name,
                                       similarity=similarity))
            else:
                backfill.append(candidate(post, in_network=False, source=BACKFILL_SOURCE,
                                          similarity=similarity))
        return close + backfill


BACKFILL_SOURCE = "similar_posts_backfill"
MIN_PER_QUERY = 20  # neighbours asked of each engaged post's search, at least
_SIMILARITY = itemgetter(1)
