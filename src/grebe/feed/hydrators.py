"""Hydrators of the home timeline: the viewer (query) and grebe's annotations (posts)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np

from grebe.feed.candidates import FeedCandidate, HomeQuery
from grebe.feed.components import Columns, Patch
from grebe.feed.features import LABEL_SET, FeatureCache
from grebe.feed.filters import content_ids
from grebe.feed.frame import CandidateFrame
from grebe.feed.indexing import embedding_of
from grebe.feed.settings import FeedSettings
from grebe.feed.viewers import ViewerDirectory
from grebe.inference.base import Embedder
from grebe.stores.base import AnnotationStore
from grebe.thunder.store import ThunderStore


class ViewerHydrator:
    """Follows, mutes, seen posts and safety level from the viewer directory; what the
    caller already put in the query is kept and merged."""

    name = "viewer"

    def __init__(self, viewers: ViewerDirectory) -> None:
        self.viewers = viewers

    async def hydrate(self, query: HomeQuery) -> Patch:
        viewer = await self.viewers.get(query.user_id)
        return {
            "following": list(dict.fromkeys([*query.following, *viewer.following])),
            "muted": query.muted | viewer.muted,
            # No copy of the viewer's seen posts (up to 10,000) unless the caller added
            # some: nothing changes a query's seen set once it is built.
            "seen": query.seen | viewer.seen if query.seen else viewer.seen,
            "engaged": list(dict.fromkeys([*query.engaged, *viewer.engaged])),
            "interests": list(dict.fromkeys([*query.interests, *viewer.interests])),
            "safety_level": query.safety_level or viewer.safety_level,
        }


class InterestHydrator:
    """The viewer's interest vector: the normalised mean of
      * the embeddings of posts they engaged with or authored (from the annotation
        store; authored = their recent posts that thunder holds), newest first, at most
        `interest_max_posts`, and
      * the embeddings of their stated interests (text, through the Embedder), which is
        what a new user with no history starts from.
    None when there is nothing to go on (then no out-of-network posts are fetched).

    Given the feature cache, the posts' embeddings are read through it (the same
    embedding, `features_of`): a viewer's engaged posts are candidates' features of
    other requests, so a request does not go to the store (a thread hop and a query
    each, on SQLite) for posts already in memory."""

    name = "interests"

    def __init__(
        self, viewers: ViewerDirectory, store: AnnotationStore, embedder: Embedder | None,
        authored: AuthoredPosts | None, settings: FeedSettings,
        features: FeatureCache | None = None,
    ) -> None:
        self.viewers = viewers
        self.store = store
        self.features = features
        self.embedder = embedder
        self.authored = authored
        self.settings = settings

    async def hydrate(self, query: HomeQuery) -> Patch:
        viewer = await self.viewers.get(query.user_id)
        post_ids = list(dict.fromkeys([*query.engaged, *viewer.engaged]))
        if self.authored is not None:
            post_ids += self.authored.recent_post_ids(query.user_id)
        post_ids = post_ids[: self.settings.interest_max_posts]
        vectors: list[Any]
        if self.features is not None:
            cached = await self.features.get_many(post_ids)
            vectors = [f["embedding"] for f in cached if f["embedding"] is not None]
        else:
            found = await asyncio.gather(*(self.store.get(pid) for pid in post_ids))
            vectors = [v for v in (embedding_of(a, self.settings.embedding_producer)
                                   for a in found) if v is not None]
        interests = list(dict.fromkeys([*query.interests, *viewer.interests]))
        if interests and self.embedder is not None:
            vectors.extend(np.asarray(await self.embedder.embed(interests)).tolist())
        if not vectors:
            return {"interest_vector": None, "interest_vectors": []}
        dims = {len(v) for v in vectors}
        if len(dims) != 1:
            raise ValueError(f"embeddings of different dimensions {sorted(dims)}")
        matrix = np.asarray(vectors, dtype=np.float32)
        mean = matrix.mean(axis=0)
        norm = float(np.linalg.norm(mean))
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        unit = matrix / np.where(norms > 0, norms, 1.0)
        return {"interest_vector": mean / norm if norm else None, "interest_vectors": unit}


class AuthoredPosts:
    """The viewer's own recent post ids, newest first, from an in-process ThunderStore."""

    def __init__(self, store: ThunderStore) -> None:
        self.store = store

    def recent_post_ids(self, user_id: str) -> list[str]:
        posts = self.store.authors.get(user_id)
        if posts is None:
            return []
        return [p.post_id for p in reversed(posts.originals)]


class AnnotationHydrator:
    """Labels, scores and embedding of each candidate, from the feature cache in front
    of the annotation store; a retweet gets its source post's (the content shown). A
    candidate frame also gets each post's label-set code (for the safety filter)."""

    name = "annotations"

    def __init__(self, features: FeatureCache) -> None:
        self.features = features

    async def hydrate(self, query: HomeQuery, candidates: Sequence[FeedCandidate]
                      ) -> Columns:
        # One gather per column from the feature table; the embeddings as one matrix.
        columns = Columns(await self.features.columns(content_ids(candidates)))
        if not isinstance(candidates, CandidateFrame):  # objects have no such attribute
            del columns[LABEL_SET]
        return columns
