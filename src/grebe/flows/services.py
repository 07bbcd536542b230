"""What flow tasks may use (`ctx.services`): the models container, media, sinks and small
shared state. Tasks ask the container for a model (`ctx.services.models.embedder`); an
optional one (language id, chat model, trained heads) is None when it is off.

The bundle builds one `FlowServices` per engine process in its start(); tasks only read
it. Everything here is behind a protocol, so unit tests assemble it from test doubles
(grebe.inference.fakes) and the real bundle from the inference/media factories.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import msgspec
import numpy as np
from cachetools import TTLCache

from grebe import constants as C
from grebe.inference.turn_batch import TurnBatcher
from grebe.stores.base import AnnotationStore
from grebe.types import Post

if TYPE_CHECKING:
    from grebe.flows.models import FlowModels


class MediaFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What plans need from a post's media, whatever pipeline produced it."""

    nsfw: tuple[float, ...] = ()  # one score per image or sampled video frame
    ocr_text: str = ""
    transcript: str = ""
    transcript_language: str | None = None
    nsfw_model: str = ""  # name of the model that produced `nsfw`
    items: int = 0  # media items looked at
    errors: tuple[str, ...] = ()  # per-item problems (unsafe URL, corrupt video...)
    # One line per media item that was not checked (failed, refused, over a cap, not
    # scored), saying which and why. Non-empty means no verdict may read as "clean".
    unchecked: tuple[str, ...] = ()

    @property
    def max_nsfw(self) -> float:
        return max(self.nsfw, default=0.0)


@runtime_checkable
class MediaHydrator(Protocol):
    """Fetches and analyses a post's media (NSFW, OCR, transcript) once."""

    async def hydrate(self, post: Post) -> MediaFacts: ...


@runtime_checkable
class SpamScorer(Protocol):
    """The trained spam head: embeddings [n, d] -> spam probabilities [n]."""

    @property
    def name(self) -> str: ...

    def score(self, embeddings: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class TextHeadScorer(Protocol):
    """grebe.inference.heads.TextHeads as flows use it: trained heads that all read one
    embedding of a text (and, for heads fused with char n-grams, the text itself:
    `predict(embeddings, texts)`). `heads` maps a head name to its HeadInfo (classes, languages,
    validation thresholds, target_fpr, sources)."""

    @property
    def version(self) -> str: ...

    @property
    def embedder(self) -> str: ...

    @property
    def heads(self) -> Mapping[str, Any]: ...

    def predict(self, embeddings: np.ndarray,
                texts: Sequence[str] | None = None) -> dict[str, np.ndarray]: ...


@runtime_checkable
class OutputProducer(Protocol):
    async def publish(self, topic: str, key: bytes | None, value: bytes) -> None: ...

    async def publish_many(self, topic: str,
                           records: Sequence[tuple[bytes | None, bytes]]) -> None: ...


class RecentKeys:
    """Post ids annotated recently, per plan (dedupe within each plan's TTL). Bounded;
    a key is recorded by the sink after a successful write, so a retry of a failed
    attempt is never deduplicated away."""

    def __init__(self, maxsize: int = 100_000, max_ttl_s: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._seen: TTLCache[tuple[str, str], float] = TTLCache(maxsize, max_ttl_s, timer=clock)
        self._clock = clock

    def seen(self, plan: str, key: str, ttl_s: float) -> bool:
        at = self._seen.get((plan, key))
        return at is not None and self._clock() - at < ttl_s

    def record(self, plan: str, key: str) -> None:
        self._seen[(plan, key)] = self._clock()


class PlanLimiter:
    """Per-plan QPS budgets with the `limits` library (moving window), built exactly
    like the dispatcher's stream limits. A plan over budget waits for the next slot,
    bounded by the plan's `rate_limit_max_wait_s`; the caller skips the post when even
    that is not enough. "redis://..." shares the budget across processes and replicas;
    "memory://" counts in each engine process, so each of `engines` engines keeps to
    1/engines of it: together never more than the plan's `max_qps`, and all of it while
    posts spread evenly (engines take authors by hash: docs/benchmarks.md, "Two engines
    by default")."""

    def __init__(self, storage_uri: str = "memory://",
                 namespace: str = C.DEFAULT_REDIS_NAMESPACE, *, engines: int = 1) -> None:
        self._storage_uri = storage_uri
        self._namespace = namespace  # the deployment's Redis key namespace
        self._share = 1 / engines if storage_uri.startswith("memory://") else 1.0
        self._limiter: Any = None
        self._items: dict[float, Any] = {}

    async def acquire(self, plan: str, qps: float, max_wait_s: float) -> bool:
        """True once a slot is taken; False if none frees up within max_wait_s."""
        from limits.aio.strategies import MovingWindowRateLimiter

        from grebe.core.ratelimit import limiter_storage_from, qps_item

        qps *= self._share
        if self._limiter is None:
            storage: Any = limiter_storage_from(self._storage_uri, self._namespace)
            self._limiter = MovingWindowRateLimiter(storage)
        item = self._items.get(qps)
        if item is None:
            item = self._items[qps] = qps_item(qps)
        deadline = time.time() + max_wait_s
        while not await self._limiter.hit(item, plan):
            stats = await self._limiter.get_window_stats(item, plan)
            wait = max(0.0, stats.reset_time - time.time())
            if time.time() + wait > deadline:
                return False
            # Sleep exactly until the window frees a slot (not a spin), then try again.
            await asyncio.sleep(wait)
        return True


@dataclass
class FlowServices:
    """Injected into every plan as `ctx.services`."""

    settings: Any  # grebe.flows.settings.FlowSettings
    models: FlowModels  # every model the plans call, built once (grebe.flows.models)
    store: AnnotationStore
    cache: Any  # grebe.core.memo.SharedCache
    authors: Any  # grebe.flows.author_memory.AuthorMemory
    media: MediaHydrator | None = None
    producer: OutputProducer | None = None
    output_topic: str = "annotations"
    prompts: Any = None  # grebe.flows.llm.PromptBook
    limiter: PlanLimiter = field(default_factory=PlanLimiter)
    dedupe: RecentKeys = field(default_factory=RecentKeys)
    plan_versions: dict[str, str] = field(default_factory=dict)  # filled by the registry
    records: Any = None  # grebe.flows.sinks.FlagRecords (OR-merged boolean metadata)
    # What the flows contribute (`Flow.services`), by key: PTOS's enforcement history,
    # spam's coordination index, a new flow's own state.
    contributed: dict[str, Any] = field(default_factory=dict)
    # the text heads' rows of one loop turn, scored together (grebe.flows.shared.head_probs)
    head_turns: TurnBatcher[Any, Any] = field(default_factory=TurnBatcher)

    async def prelude(self, payload: Any, plans: Sequence[Any], memo: Any) -> None:
        """The core PlanMaster's prelude hook: a text-only post's shared model work,
        once before its plans start (grebe.flows.prelude)."""
        from grebe.flows.prelude import warm

        await warm(self, payload, plans, memo)

    def contribution(self, key: str) -> Any:
        """The service a flow contributed under `key`; None when none did (services
        assembled by hand for a test, or a flow that is not installed)."""
        return self.contributed.get(key)


def first(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    return rows[0] if rows else {}
