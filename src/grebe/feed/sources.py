"""Candidate sources of the home timeline: in-network (thunder) and out-of-network
(nearest neighbours of the viewer's interest vector among recent posts)."""

from __future__ import annotations

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
    """Posts near the viewer's interests from authors they do not follow."""

    name = "similar_posts"

    def __init__(self, index: PostANNIndex, posts: PostLookup, settings: FeedSettings) -> None:
        self.index = index
        self.posts = posts
        self.settings = settings

    async def fetch(self, query: HomeQuery) -> list[FeedCandidate]:
        k = self.settings.out_of_network_max
        if query.interest_vector is None or not k:
            return []
        followed = set(query.following)
        out = []
        # Ask for more than k: followed authors' and the viewer's own posts are skipped.
        exclude = query.seen.union(query.engaged)
        for post_id, similarity in self.index.search(query.interest_vector, 2 * k, exclude):
            if similarity < self.settings.min_similarity:
                break  # most similar first: the rest are less similar still
            post = self.posts.get(post_id)
            if post is None or post.author_id in followed or post.author_id == query.user_id:
                continue
            out.append(candidate(post, in_network=False, source=self.name,
                                 similarity=similarity))
            if len(out) == k:
                break
        return out
