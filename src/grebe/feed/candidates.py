"""What flows through the home pipeline: the request (HomeQuery) and each candidate post.

Both are mutable Structs because pipeline components return patches that the pipeline
applies to them (see grebe.feed.pipeline)."""

from __future__ import annotations

import math
import time
import uuid
from typing import Any

import msgspec


class HomeQuery(msgspec.Struct, kw_only=True):
    user_id: str
    max_results: int = 50
    safety_level: str | None = None  # None: the viewer's, else the configured default
    now: float = msgspec.field(default_factory=time.time)
    #: In every log line of this request (a caller may pass its own, e.g. a header).
    request_id: str = msgspec.field(default_factory=lambda: uuid.uuid4().hex[:16])
    # Filled by the query hydrators (or given by the caller).
    following: list[str] = []
    muted: set[str] = set()
    seen: set[str] = set()
    engaged: list[str] = []  # posts the viewer liked, replied to, shared
    interests: list[str] = []  # stated interests, as text
    #: The viewer's interests as one unit vector, and the unit embeddings it is the mean
    #: of (engaged, authored, stated): float32 arrays as the interest hydrator gives
    #: them (turning 6 x 384 floats into Python lists and back in each of three
    #: readers cost ~0.1 ms a request), or lists from a caller. Any for msgspec.
    interest_vector: Any = None
    interest_vectors: Any = []


class FeedCandidate(msgspec.Struct, kw_only=True):
    post_id: str
    author_id: str
    created_at: float
    in_network: bool
    source: str
    source_post_id: str | None = None  # for a retweet: the post whose content it shows
    source_author_id: str | None = None
    in_reply_to_post_id: str | None = None
    similarity: float | None = None  # cosine to the viewer's interests, when known
    # Filled by hydrators.
    labels: list[str] = []
    scores: dict[str, float] = {}
    #: A float32 numpy array once hydrated (the scorer stacks them); Any for msgspec.
    embedding: Any = None
    #: The annotation scores the ranker weighs (`feed.quality_score_key` and
    #: `engagement_score_key`, their defaults where absent), read once per post by the
    #: feature cache, so ranking reads two float columns instead of 1,500 dicts twice.
    quality: float | None = None
    engagement: float | None = None
    # Filled by scorers.
    score: float = 0.0
    #: Each signal's contribution (weight x signal) and the author-diversity factor;
    #: filled for served posts (grebe.feed.scorers.contributions).
    score_parts: dict[str, float] = {}
    signals: dict[str, float] = {}  # each signal's value, 0..1
    diversity: float = 1.0  # the author-diversity factor the score was multiplied by
    #: Why this post is here (source, filters passed, contributions); set once selected.
    explanation: dict[str, object] = {}

    @property
    def content_id(self) -> str:
        """The post whose content is shown (a retweet shows its source)."""
        return self.source_post_id or self.post_id


def _plain(name: str, value: Any) -> Any:
    """A column value as the candidate attribute: a missing similarity is NaN in its
    float column and None on the object."""
    if name == "similarity" and value is not None and math.isnan(value):
        return None
    return value


def candidate_row(values: dict[str, Any]) -> FeedCandidate:
    """The FeedCandidate of one row of a candidate frame (grebe.feed.frame)."""
    if "similarity" in values:
        values["similarity"] = _plain("similarity", values["similarity"])
    return FeedCandidate(**values)


def assign_candidate(candidate: FeedCandidate, name: str, value: Any) -> None:
    """Set one column's value on a candidate built already from its frame row."""
    setattr(candidate, name, _plain(name, value))
