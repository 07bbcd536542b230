"""Banger initial screen: is this post a candidate for the best-of timeline, and what
is it about?

Local classifier: a quality score from the shape of the text, early engagement per view
and media, discounted for spam and offensiveness; only a post with engagement counts
(`candidate_min_views`) can be a candidate: shape and media alone are not quality.
Topic tags from the cosine between the post embedding and each configured topic's
centroid (the embedding of its description), plus the post's hashtags; each configured
topic's category in the `taxonomy` (`category:<name>`). Boolean metadata of the post
(`meta:has_image`, `meta:has_video`, `meta:has_media_text`, `meta:has_speech`,
`meta:has_link`) is labelled too, and, with the candidate label, applied to the post's
record by the plan's sink rules (OR-merged, grebe.flows.sinks).
"""

from __future__ import annotations

import re
from typing import Annotated

import msgspec

from grebe.core.plan import Plan
from grebe.core.task import TaskContext
from grebe.flows import language, llm, shared
from grebe.flows.catalog import Flow
from grebe.flows.services import MediaFacts
from grebe.flows.settings import BangerSettings
from grebe.flows.sinks import SinkRules, sink_with
from grebe.flows.text_signals import count_links, words
from grebe.types import Post

VERSION = "1"
NAME = "banger_initial_screen"  # the plan, its eligibility and its `plans.` key
LABEL_BANGER = "banger_candidate"
TOPIC_PREFIX = "topic:"
CATEGORY_PREFIX = "category:"
META_PREFIX = "meta:"
BOOL_METADATA = ("has_image", "has_video", "has_media_text", "has_speech", "has_link")
# Quality = weighted shape/engagement/media, times (1 - offensive), times the spam factor.
QUALITY_WEIGHTS = {"shape": 0.5, "engagement": 0.35, "media": 0.15}
SPAM_FACTOR = 0.2
_HASHTAG = re.compile(r"#([A-Za-z]\w{1,29})")


class BangerVerdict(msgspec.Struct):
    quality: llm.Unit
    topics: Annotated[list[str], msgspec.Meta(max_length=3)]
    reason: str


def shape_score(n_words: int, settings: BangerSettings) -> float:
    if n_words < settings.min_words:
        return n_words / settings.min_words
    if n_words > settings.max_words:
        return settings.max_words / n_words
    return 1.0


def engagement_score(post: Post, saturation: float) -> float:
    if post.view_count <= 0:
        return 0.0
    weighted = post.like_count + 2 * post.repost_count + post.reply_count
    return min(1.0, weighted / post.view_count / saturation)


async def embedding(ctx: TaskContext) -> object:
    if shared.uses_llm(ctx):  # the chat model names the topics
        return None
    return await shared.text_embedding(ctx)


async def topics(ctx: TaskContext) -> dict[str, float]:
    """Topic -> cosine, for topics at or above the threshold (centroids are cached)."""
    settings: BangerSettings = shared.settings_of(ctx)
    vector = ctx.results["embedding"]
    tagged: dict[str, float] = {}
    if vector is None:
        return tagged
    if settings.topics:
        centroids = await shared.embed_configured_rows(ctx, tuple(settings.topics.values()))
        # Rows are L2-normalised, as the post's vector: the products are the cosines.
        for name, similarity in zip(settings.topics, (centroids @ vector).tolist(),
                                    strict=True):
            if similarity >= settings.topic_threshold:
                tagged[name] = similarity
    for tag in _HASHTAG.findall(ctx.payload.post.text):
        tagged.setdefault(tag.lower(), 1.0)
    return tagged


async def penalties(ctx: TaskContext) -> dict[str, float]:
    """Spam and offensiveness discounts; none when the models do not cover the language
    (an English spam head reads benign Japanese as spam)."""
    if shared.uses_llm(ctx) or await language.local_abstain(
            ctx, "the spam and offensive-language models"):
        return {"spam": 0.0, "offensive": 0.0}
    text = ctx.payload.post.text
    return {"spam": await shared.spam_head_score(ctx, text),
            "offensive": await shared.offensive_score(ctx, text)}


def bool_metadata(post: Post, facts: MediaFacts) -> list[str]:
    """The post's boolean metadata that is true (only checked media counts)."""
    kinds = {m.kind for m in post.media} if not facts.unchecked else set()
    found = {"has_image": "image" in kinds, "has_video": "video" in kinds,
             "has_media_text": bool(facts.ocr_text.strip()),
             "has_speech": bool(facts.transcript.strip()),
             "has_link": count_links(post.text) > 0}
    return [name for name in BOOL_METADATA if found[name]]


def categories(tags: dict[str, float], settings: BangerSettings) -> list[str]:
    """Categories of the tagged topics, best topic's first (hashtags have none)."""
    ranked = sorted(tags, key=lambda t: -tags[t])
    return list(dict.fromkeys(settings.taxonomy[t] for t in ranked if t in settings.taxonomy))


async def score(ctx: TaskContext) -> float:
    settings: BangerSettings = shared.settings_of(ctx)
    post = ctx.payload.post
    if ctx.services.settings.backend(ctx.plan) == "llm":
        verdict = await llm.ask(ctx, "banger", BangerVerdict, text=post.text)
        quality, reason = verdict.quality, verdict.reason
        tags = {t.lower(): 1.0 for t in verdict.topics}
    else:
        parts = {
            "shape": shape_score(len(words(post.text)), settings),
            "engagement": engagement_score(post, settings.engagement_saturation),
            # Credit only media that was checked: a broken or refused link is not media.
            "media": 1.0 if post.media and not ctx.results["media"].unchecked else 0.0,
        }
        pen = ctx.results["penalties"]
        spam_factor = SPAM_FACTOR if pen["spam"] >= settings.spam_penalty_threshold else 1.0
        quality = sum(QUALITY_WEIGHTS[k] * v for k, v in parts.items())
        quality *= (1.0 - pen["offensive"]) * spam_factor
        reason = ", ".join(f"{k} {v:.2f}" for k, v in parts.items())
        reason += f"; spam {pen['spam']:.2f}, offensive {pen['offensive']:.2f}"
        tags = ctx.results["topics"]
    # The chat model reads quality from the text itself; the local score needs counts.
    unseen = not shared.uses_llm(ctx) and post.view_count < settings.candidate_min_views
    if unseen:
        reason += (f"; not a candidate: {post.view_count} views < {settings.candidate_min_views}"
                   " (the screen needs engagement counts)")
    if quality >= settings.threshold and not unseen:
        ctx.output.labels.append(LABEL_BANGER)
    ctx.output.labels.extend(f"{TOPIC_PREFIX}{t}" for t in sorted(tags, key=lambda t: -tags[t]))
    ctx.output.labels.extend(f"{CATEGORY_PREFIX}{c}" for c in categories(tags, settings))
    ctx.output.labels.extend(f"{META_PREFIX}{m}" for m in bool_metadata(post, ctx.results["media"]))
    ctx.output.scores["quality"] = round(quality, 4)
    ctx.output.scores.update({f"{TOPIC_PREFIX}{t}": round(s, 4) for t, s in tags.items()})
    ctx.output.reasons["quality"] = reason
    return quality


PLAN = Plan(
    NAME,
    tasks={
        "filter": shared.filters,
        "rate_limit": shared.rate_limit,
        "media": shared.media_task,
        "embedding": embedding,
        "topics": topics,
        "penalties": penalties,
        "score": score,
        # The candidate label and the boolean metadata are applied to the post's record.
        "sink": sink_with(SinkRules(post_flags=frozenset(
            {LABEL_BANGER, *(f"{META_PREFIX}{m}" for m in BOOL_METADATA)}))),
    },
    deps={
        "rate_limit": ["filter"],
        "media": ["rate_limit"],
        "embedding": ["rate_limit"],
        "topics": ["embedding"],
        "penalties": ["embedding"],
        "score": ["media", "topics", "penalties"],
        "sink": ["score"],
    },
    eligibility=NAME,
    version=VERSION,
)

FLOW = Flow(plan=PLAN, settings=BangerSettings, order=40, prelude=embedding)
