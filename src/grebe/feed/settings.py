"""Feed settings: the `feed:` section of the config (`GrebeConfig.feed`), validated with
the rest of the config at load."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, ConfigDict, Field, model_validator

from grebe import constants as C
from grebe.errors import ConfigError
from grebe.security.settings import HttpGuardSettings
from grebe.settings_base import Section


class ScoreWeights(Section):
    """How much each signal (each in 0..1) adds to a post's score; see
    grebe.feed.scorers.WeightedScorer and docs/serving.md."""

    model_config = ConfigDict(frozen=True)

    #: Cosine similarity to the closest post the viewer engaged with (or authored, or a
    #: stated interest): the strongest signal, so interest beats mere recency.
    interest: float = Field(default=3.0, validation_alias=AliasChoices("interest", "similarity"))
    recency: float = 1.0
    quality: float = 0.3
    engagement: float = 0.3
    in_network: float = 0.3


class FeedSettings(Section):
    model_config = ConfigDict(frozen=True)

    max_results: int = Field(default=50, ge=1, le=1000)
    in_network_max: int = Field(default=400, ge=0)
    out_of_network_max: int = Field(default=100, ge=0)
    #: Out-of-network posts less similar than this to the viewer's interests are not fetched.
    min_similarity: float = Field(default=0.2, ge=-1.0, le=1.0)
    #: When fewer than `out_of_network_max` posts pass `min_similarity` (the viewer has
    #: seen the close ones), less similar posts down to this fill the rest: they rank
    #: lower, but the feed does not run dry.
    backfill_min_similarity: float = Field(default=-1.0, ge=-1.0, le=1.0)
    #: Out-of-network retrieval groups the viewer's interest vectors (engaged, authored,
    #: stated; newest first) by similarity and searches near each group's centre, at
    #: most this many groups (vectors beyond them are left to the ranker), so a viewer
    #: with two interests finds both; 0: the interest mean alone.
    interest_queries: int = Field(default=3, ge=0)
    #: A vector joins a group whose centre it has at least this cosine with.
    interest_group_similarity: float = Field(default=0.5, ge=-1.0, le=1.0)
    #: A viewer's out-of-network neighbourhood (the posts the interest searches found)
    #: is reused for this long while their interests stay the same, for at most
    #: `neighbourhood_cache_viewers` viewers: a returning viewer skips the searches
    #: (seen, followed and deleted posts are still left out on every request; new
    #: posts reach the neighbourhood after at most this long). 0: search every time.
    neighbourhood_cache_s: float = Field(default=C.FEED_NEIGHBOURHOOD_TTL_S, ge=0)
    neighbourhood_cache_viewers: int = Field(default=C.FEED_NEIGHBOURHOOD_VIEWERS, ge=1)
    weights: ScoreWeights = ScoreWeights()
    recency_half_life_s: float = Field(default=6 * 3600.0, gt=0)
    #: The n-th post of an author in one feed is multiplied by decay**n (never below floor).
    author_diversity_decay: float = Field(default=0.6, gt=0, le=1)
    author_diversity_floor: float = Field(default=0.1, ge=0, le=1)
    #: Viewer safety level -> labels that remove a post for that viewer.
    safety_levels: dict[str, list[str]] = Field(default_factory=lambda: {
        # media_unchecked: media that could not be checked is not shown to strict viewers
        # (fail closed); threats are removed for everyone but "off".
        "strict": ["nsfw", "hate", "offensive", "insult", "threat", "spam", "unsafe",
                   "media_unchecked"],
        "default": ["nsfw", "hate", "threat", "spam", "unsafe"],
        "off": [],
    })
    default_safety_level: str = "default"
    quality_score_key: str = "quality"
    #: A post without a quality score counts as this (not 0: no flow scored it yet).
    quality_default: float = Field(default=0.5, ge=0, le=1)
    engagement_score_key: str = "engagement"
    #: Which producer's embedding represents a post (None: the newest with one).
    embedding_producer: str | None = None
    #: The viewer's interest vector uses at most this many engaged and authored posts.
    interest_max_posts: int = Field(default=100, ge=1)
    annotation_concurrency: int = Field(default=32, ge=1)
    #: Candidate features kept in memory (grebe.feed.features): how many posts, and how
    #: long a post's features are trusted when written around the feed.
    feature_cache_posts: int = Field(default=200_000, ge=0)
    feature_cache_ttl_s: float = Field(default=300.0, gt=0)
    component_timeout_s: float = Field(default=1.0, gt=0)
    #: Where thunder runs: None = in this process; "host:port" = its gRPC service.
    thunder_target: str | None = None
    thunder_budget_ms: float = Field(default=50.0, gt=0)
    #: The environment variable holding the key sent to thunder (when it requires keys).
    thunder_key_env: str | None = None
    #: The CA that signed thunder's certificate: set it when thunder serves TLS.
    thunder_tls_ca_file: Path | None = None
    #: Admission control of feed-serve: home requests running at once (each costs CPU
    #: in one event loop, so latency grows with this); beyond it a 503 with Retry-After
    #: at once, so overload sheds requests instead of queueing them without bound.
    max_concurrent_requests: int = Field(default=C.FEED_MAX_CONCURRENT_REQUESTS, ge=1)
    retry_after_s: int = Field(default=C.FEED_RETRY_AFTER_S, ge=0)
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=C.DEFAULT_FEED_PORT, ge=0, le=65535)
    #: feed-serve worker processes on the port: a home request is CPU in one event loop,
    #: so one process uses one core. Each worker holds its own copy of the feed (thunder
    #: replay, index, feature table: memory times this); what a viewer was served is
    #: shared between them (grebe.feed.replication).
    http_workers: int = Field(default=1, ge=1)
    #: Host/Origin allowlists and connection timeouts of feed-serve (docs/security.md).
    http: HttpGuardSettings = HttpGuardSettings()

    @model_validator(mode="after")
    def _default_level_exists(self) -> FeedSettings:
        if self.default_safety_level not in self.safety_levels:
            known = ", ".join(sorted(self.safety_levels))
            raise ValueError(f"default_safety_level {self.default_safety_level!r} is not "
                             f"one of safety_levels ({known})")
        return self

    def blocked_labels(self, level: str | None) -> frozenset[str]:
        level = level or self.default_safety_level
        if level not in self.safety_levels:
            raise ConfigError(
                f"unknown safety level {level!r}; known: {', '.join(sorted(self.safety_levels))}"
            )
        return frozenset(self.safety_levels[level])

