"""Tasks every flow reuses: filters, rate limit, media hydration, text embedding and
scores, OCR text, transcript, and the sink.

Expensive work goes through two layers: `ctx.memo` (one computation per payload, shared
by every plan of that payload running at once) and `services.cache` (a TTL cache keyed
by content, so a retry, a repost of the same text or the same image URL on another
post is not recomputed). Settings come from `services.settings.plan(ctx.plan)`, so one
task serves every plan with that plan's thresholds.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from grebe.constants import DIGEST_CACHE_SIZE, SENTENCE_PARTS_MAX
from grebe.core.task import SkipTask, TaskContext, TaskSpec
from grebe.flows import modes
from grebe.flows.services import (
    FlowServices,
    MediaFacts,
    MediaHydrator,
    TextHeadScorer,
    first,
)
from grebe.flows.text_signals import sentence_spans
from grebe.inference.base import EncodedText
from grebe.inference.lazy import ensure_ready
from grebe.types import Annotation, Post

if TYPE_CHECKING:
    from grebe.flows.sinks import SinkRules

T = TypeVar("T")

# Memo/cache key prefixes (one place, so two tasks never collide by accident).
KEY_EMBED = "emb"
KEY_CONFIGURED_ROWS = "emb-rows"
KEY_SENTENCES = "sentences"
KEY_OFFENSIVE = "offensive"
KEY_HATE = "hate"
KEY_MEDIA = "media"
KEY_SPAM_HEAD = "spam_head"
KEY_HEADS = "heads"

# Skip reasons (they appear in task errors and the analyze output).
SKIP_DEADLINE = "deadline passed"
SKIP_POST_TYPE = "post type not handled by this plan"
SKIP_LANGUAGE = "language not handled by this plan"
SKIP_ENGAGEMENT = "below the engagement threshold"
SKIP_DUPLICATE = "already annotated within the dedupe TTL"
SKIP_RATE_LIMITED = "rate limited"

#: Added by every plan that looks at media when some item went unchecked (fail closed:
#: what could not be checked is never reported as clean). Its reason says which and why.
LABEL_MEDIA_UNCHECKED = "media_unchecked"
NO_MEDIA_SERVICE = "no media pipeline configured"
UNCHECKED_REASON_ITEMS = 8  # items named in the reason; the rest are counted


def uses_llm(ctx: TaskContext) -> bool:
    """The plan's classifier is the chat model: its local model tasks must not run (they
    would cost a model pass whose result is thrown away)."""
    return bool(ctx.services.settings.backend(ctx.plan) == "llm")


def services_of(ctx: TaskContext) -> FlowServices:
    return ctx.services


def settings_of(ctx: TaskContext) -> Any:
    return ctx.services.settings.plan(ctx.plan)


@lru_cache(maxsize=DIGEST_CACHE_SIZE)
def digest(text: str) -> str:
    """The memo and cache key of a text. Remembered per text: one post's text is keyed
    ~60 times across the six default flows (every `shared()` lookup of its embedding,
    heads, language), and a dict hit on a str (whose hash the str keeps) costs a
    fraction of hashing it again."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


async def shared(ctx: TaskContext, key: str, factory: Callable[[], Awaitable[T]]) -> T:
    """Once per payload (memo) and, across payloads and retries, once per TTL (cache):
    the payload's memo adopts the cache's computation (one asyncio task, not a memo
    task awaiting a cache task), and a value already computed is returned without any
    await machinery (~86 lookups a post through the six default flows)."""
    memo = ctx.memo
    future = memo.entry(key)
    if future is None:
        future = memo.adopt(key, partial(ctx.services.cache.future, key, factory))
    if future.done():
        return future.result()  # type: ignore[no-any-return]
    return await asyncio.shield(future)  # type: ignore[no-any-return]


# --- content helpers (used by many flows' model steps) ---

async def encoded(ctx: TaskContext, text: str) -> EncodedText:
    """The one encoder pass of `text`, computed once per distinct text. When the
    embedder pools parts from its own pass (MiniLM), the pass also sums each sentence's
    tokens, so a summary of this text (grebe.flows.embeddings) ranks and embeds its
    sentences without encoding them again: whichever plan encodes the text first serves
    the heads and the summary alike."""
    embedder = services_of(ctx).models.embedder
    ctx.output.model_versions["embedder"] = embedder.name
    return await shared(ctx, f"{KEY_EMBED}:{digest(text)}", partial(_encode, embedder, text))


async def _encode(embedder: Any, text: str) -> EncodedText:
    spans = sentence_spans(text)[:SENTENCE_PARTS_MAX] if embedder.pools_parts else []
    return await embedder.embed_parts(text, spans if len(spans) > 1 else ())


async def embed_configured(ctx: TaskContext, text: str) -> np.ndarray:
    """The embedding of a text from the configuration (a topic's description), the same
    for every post: read from the cross-payload cache only (the entry `encoded` would
    use), computed when absent or expired. A payload memo entry would cost an asyncio
    task per text per post: banger_initial_screen's eight topics made 8 of the 12 memo
    computations of a post through the six default flows, for cache hits."""
    embedder = services_of(ctx).models.embedder
    ctx.output.model_versions["embedder"] = embedder.name
    cache, key = services_of(ctx).cache, f"{KEY_EMBED}:{digest(text)}"
    found: EncodedText | None = cache.get(key)
    if found is None:
        found = await cache.get_or_compute(key, partial(_encode, embedder, text))
    return found.vector


async def embed_configured_rows(ctx: TaskContext, texts: tuple[str, ...]) -> np.ndarray:
    """`embed_configured` of each text, stacked in order into one matrix and kept in the
    cross-payload cache as such: banger_initial_screen scores a post against its eight
    topics with one lookup and one matrix product instead of eight awaited lookups and
    eight dot products a post."""
    cache = services_of(ctx).cache
    key = (KEY_CONFIGURED_ROWS, texts)
    found: np.ndarray | None = cache.get(key)
    if found is None:
        rows = [await embed_configured(ctx, text) for text in texts]
        found = np.stack(rows) if rows else np.zeros((0, 0), dtype=np.float32)
        cache.put(key, found)
    ctx.output.model_versions["embedder"] = services_of(ctx).models.embedder.name
    return found


async def encoded_sentences(ctx: TaskContext, text: str) -> EncodedText:
    """`encoded(text)` with one part per sentence (`sentence_spans`, the first
    SENTENCE_PARTS_MAX). An embedder without token outputs pays an input per sentence,
    once per text."""
    embedder = services_of(ctx).models.embedder
    if embedder.pools_parts:
        return await encoded(ctx, text)
    ctx.output.model_versions["embedder"] = embedder.name

    async def compute() -> EncodedText:
        return await embedder.embed_parts(text, sentence_spans(text)[:SENTENCE_PARTS_MAX])

    return await shared(ctx, f"{KEY_SENTENCES}:{digest(text)}", compute)


async def embed(ctx: TaskContext, text: str) -> np.ndarray:
    """One L2-normalised embedding of `text`, computed once per distinct text."""
    return (await encoded(ctx, text)).vector


def _head_p(probs: dict[str, dict[str, float]], head: str, cls: str) -> float | None:
    return probs[head][cls] if head in probs else None


async def offensive_score(ctx: TaskContext, text: str) -> float:
    """Offensiveness in [0, 1]: the trained `offensive` head when loaded (one embedding,
    shared with every other head), else alt-profanity-check."""
    services = services_of(ctx)
    if services.models.heads is not None:
        p = _head_p(await head_probs(ctx, text), "offensive", "offensive")
        if p is not None:
            return p
    ctx.output.model_versions["offensive"] = services.models.offensive.name

    async def compute() -> float:
        rows = await services.models.offensive.classify([text])
        return float(max(first(rows).values(), default=0.0))

    return await shared(ctx, f"{KEY_OFFENSIVE}:{digest(text)}", compute)


async def hate_scores(ctx: TaskContext, text: str) -> dict[str, float]:
    """{"hate": p, "offensive": p} from the trained heads when loaded, else HateSonar."""
    services = services_of(ctx)
    if services.models.heads is not None:
        probs = await head_probs(ctx, text)
        hate, offensive = _head_p(probs, "hate", "hate"), _head_p(probs, "offensive", "offensive")
        if hate is not None and offensive is not None:
            return {"hate": hate, "offensive": offensive}
    ctx.output.model_versions["hate"] = services.models.hate.name

    async def compute() -> dict[str, float]:
        return first(await services.models.hate.classify([text]))

    return await shared(ctx, f"{KEY_HATE}:{digest(text)}", compute)


async def spam_head_score(ctx: TaskContext, text: str) -> float:
    """Spam probability: the trained `spam` head when loaded, else the e-mail spam head."""
    services = services_of(ctx)
    if services.models.heads is not None:
        p = _head_p(await head_probs(ctx, text), "spam", "spam")
        if p is not None:
            return p
    vector = await embed(ctx, text)
    await ensure_ready(services.models.spam_head)  # loaded on first use beside the heads
    ctx.output.model_versions["spam_head"] = services.models.spam_head.name

    async def compute() -> float:
        return float(services.models.spam_head.score(vector[None, :])[0])

    return await shared(ctx, f"{KEY_SPAM_HEAD}:{digest(text)}", compute)


async def head_probs(ctx: TaskContext, text: str) -> dict[str, dict[str, float]]:
    """{head: {class: p}} from every trained head on the one embedding of `text`: one
    encoder pass (the `embed` memo) feeds all heads, and the heads run once per text."""
    heads = services_of(ctx).models.heads
    if heads is None:
        return {}
    vector = await embed(ctx, text)
    ctx.output.model_versions["heads"] = heads.version

    async def compute() -> dict[str, dict[str, float]]:
        # One heads call for every post of this loop turn (inference.turn_batch): an
        # encoder batch resumes its posts together, and a row costs ~3x less batched.
        turn = services_of(ctx).head_turns
        return await turn.submit(id(heads), partial(_score_heads, heads), (vector, text))

    return await shared(ctx, f"{KEY_HEADS}:{digest(text)}", compute)


def _score_heads(heads: TextHeadScorer,
                 rows: list[tuple[np.ndarray, str]]) -> list[dict[str, dict[str, float]]]:
    """{head: {class: p}} per (embedding, text) row, every head in one call."""
    probs = heads.predict(np.stack([vector for vector, _ in rows]), [text for _, text in rows])
    classes = [(name, info.classes) for name, info in heads.heads.items()]
    return [{name: {c: float(p) for c, p in zip(cls, probs[name][i], strict=True)}
             for name, cls in classes} for i in range(len(rows))]


async def language(ctx: TaskContext) -> str | None:
    """The post's declared language, else the detector's best guess (even an unsure one:
    the `languages` filter routes posts; grebe.flows.language decides what models may
    judge)."""
    from grebe.flows.language import guess

    return (await guess(ctx)).top


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Embeddings are L2-normalised, so the dot product is the cosine."""
    return float(np.dot(a, b))


# --- tasks (async fn(ctx)), shared by the plans ---

async def filters(ctx: TaskContext) -> None:
    """Deadline, post type, engagement, dedupe by post id, language: skip early and
    cheaply, before any model runs."""
    settings = settings_of(ctx)
    why = skip_before_language(ctx, settings)
    if why:
        raise SkipTask(why)
    if settings.languages and (await language(ctx)) not in settings.languages:
        raise SkipTask(SKIP_LANGUAGE)


def skip_before_language(ctx: TaskContext, settings: Any) -> str | None:
    """Why `filters` skips the post before it needs the language (deadline, post type,
    engagement, dedupe), or None; no side effects, so the prelude asks it too."""
    payload, post = ctx.payload, ctx.payload.post
    if payload.expired():
        return SKIP_DEADLINE
    if ("reply" if post.is_reply else "original") not in settings.post_types:
        return SKIP_POST_TYPE
    if post.like_count + post.reply_count + post.repost_count < settings.min_engagement or (
        post.view_count < settings.min_views
    ):
        return SKIP_ENGAGEMENT
    if settings.dedupe_ttl_s and services_of(ctx).dedupe.seen(
        modes.dedupe_scope(ctx), post.id, settings.dedupe_ttl_s
    ):
        return SKIP_DUPLICATE
    return None


async def rate_limit(ctx: TaskContext) -> None:
    settings = settings_of(ctx)
    if settings.max_qps is None:
        return
    limiter = services_of(ctx).limiter
    if not await limiter.acquire(ctx.plan, settings.max_qps, settings.rate_limit_max_wait_s):
        raise SkipTask(SKIP_RATE_LIMITED)


async def hydrate_media(ctx: TaskContext) -> MediaFacts:
    """Fetch and analyse the post's media once (NSFW, OCR, transcript); no media -> empty
    facts, so text-only posts flow through the same DAG. Media that could not be checked
    (no media service, or items that failed) labels the plan's output `media_unchecked`."""
    post, media = ctx.payload.post, services_of(ctx).media
    if not post.media:
        return MediaFacts()
    if media is None:
        facts = MediaFacts(unchecked=tuple(f"{m.url}: {NO_MEDIA_SERVICE}" for m in post.media))
    else:
        key = f"{KEY_MEDIA}:{digest('|'.join(m.url for m in post.media))}"
        facts = await _hydrate_once(ctx, key, media, post)
    if facts.transcript:
        ctx.output.transcript = facts.transcript
    flag_unchecked_media(ctx, facts)
    return facts


async def _hydrate_once(ctx: TaskContext, key: str, media: MediaHydrator,
                        post: Post) -> MediaFacts:
    """Like `shared()`, but the hydration runs in the payload memo only, never as a
    cache-owned task: when the payload is given up (timeout, deadline, shutdown) the memo
    is closed, which cancels the hydration and with it the post's media jobs. Only a
    finished result is put in the cross-payload cache."""
    cache = services_of(ctx).cache
    cached: MediaFacts | None = cache.get(key)
    if cached is not None:
        return cached

    async def compute() -> MediaFacts:
        facts = await media.hydrate(post)
        cache.put(key, facts)
        return facts

    return await ctx.memo.get_or_compute(key, compute)


def flag_unchecked_media(ctx: TaskContext, facts: MediaFacts) -> None:
    """Label the output `media_unchecked` with a reason naming the first items and why,
    and score how many went unchecked, so no downstream reader mistakes silence for clean."""
    if not facts.unchecked:
        return
    shown = list(facts.unchecked[:UNCHECKED_REASON_ITEMS])
    if len(facts.unchecked) > len(shown):
        shown.append(f"... and {len(facts.unchecked) - len(shown)} more")
    if LABEL_MEDIA_UNCHECKED not in ctx.output.labels:
        ctx.output.labels.append(LABEL_MEDIA_UNCHECKED)
    ctx.output.scores[LABEL_MEDIA_UNCHECKED] = float(len(facts.unchecked))
    ctx.output.reasons[LABEL_MEDIA_UNCHECKED] = "; ".join(shown)


#: Media hydration may queue behind other posts' downloads and transcriptions.
MEDIA_TIMEOUT_S = 180.0
media_task = TaskSpec(hydrate_media, timeout_s=MEDIA_TIMEOUT_S)


async def text_embedding(ctx: TaskContext) -> np.ndarray:
    return await embed(ctx, ctx.payload.post.text)


async def ocr_text(ctx: TaskContext) -> str:
    facts: MediaFacts = ctx.results["media"]
    return facts.ocr_text


async def transcript(ctx: TaskContext) -> str:
    facts: MediaFacts = ctx.results["media"]
    return facts.transcript


async def sink(ctx: TaskContext, rules: SinkRules | None = None) -> Annotation:
    """Record the post's language in the output and hand the annotation to the post's
    writes (grebe.flows.sinks.PostWrites: written with the post's other annotations,
    as the plan's `rules` say, once its plans have finished); once written, the post is
    remembered for the plan's dedupe window."""
    from grebe.flows.language import record
    from grebe.flows.sinks import POST_WRITES, PostWrites

    services = services_of(ctx)
    await record(ctx)
    writes = ctx.memo.finisher(POST_WRITES, partial(
        PostWrites, services.store, services.producer, services.output_topic, services.records))
    remember = None
    if settings_of(ctx).dedupe_ttl_s:
        remember = partial(services.dedupe.record, modes.dedupe_scope(ctx), ctx.payload.post.id)
    return writes.add(ctx, producer=ctx.plan, version=services.plan_versions.get(ctx.plan, "1"),
                      rules=rules, policy_version=services.settings.policy_version or None,
                      then=remember)
