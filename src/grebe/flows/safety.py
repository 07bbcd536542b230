"""Post safety: is this post hateful, offensive or sexual?

Local classifier: the hate/offensive text model and the profanity model on the post
text and, separately, on the text found in its media (OCR of images and frames, the
video transcript); the NSFW image model on every image and sampled video frame.
A post is labelled by every check it fails, or `safe` — but never `safe` when some
media item went unchecked (then `media_unchecked`, added by the media task, says why).
"""

from __future__ import annotations

from grebe.core.plan import Plan
from grebe.core.task import TaskContext
from grebe.flows import llm, shared
from grebe.flows.services import MediaFacts
from grebe.flows.settings import SafetySettings
from grebe.types import Eligibility

VERSION = "1"
LABEL_SAFE = "safe"
LABEL_NSFW = "nsfw"
LABEL_HATE = "hate"
LABEL_OFFENSIVE = "offensive"


async def text_scores(ctx: TaskContext, text: str) -> dict[str, float]:
    if not text.strip():
        return {LABEL_HATE: 0.0, LABEL_OFFENSIVE: 0.0}
    hate = await shared.hate_scores(ctx, text)
    profanity = await shared.offensive_score(ctx, text)
    return {
        LABEL_HATE: hate.get(LABEL_HATE, 0.0),
        LABEL_OFFENSIVE: max(profanity, hate.get(LABEL_OFFENSIVE, 0.0)),
    }


async def post_text(ctx: TaskContext) -> dict[str, float]:
    return await text_scores(ctx, ctx.payload.post.text)


async def media_text(ctx: TaskContext) -> dict[str, float]:
    facts: MediaFacts = ctx.results["media"]
    return await text_scores(ctx, f"{facts.ocr_text}\n{facts.transcript}")


async def classify(ctx: TaskContext) -> list[str]:
    settings: SafetySettings = shared.settings_of(ctx)
    facts: MediaFacts = ctx.results["media"]
    if ctx.services.settings.backend(ctx.plan) == "llm":
        verdict = await llm.ask(
            ctx, "safety", llm.SafetyVerdict, text=ctx.payload.post.text,
            ocr_text=facts.ocr_text or "(none)", transcript=facts.transcript or "(none)",
        )
        text = {LABEL_HATE: verdict.hate, LABEL_OFFENSIVE: verdict.offensive}
        media, why_text = {LABEL_HATE: 0.0, LABEL_OFFENSIVE: 0.0}, verdict.reason
    else:
        text, media, why_text = ctx.results["post_text"], ctx.results["media_text"], ""
    scores = {
        LABEL_NSFW: facts.max_nsfw,
        LABEL_HATE: max(text[LABEL_HATE], media[LABEL_HATE]),
        LABEL_OFFENSIVE: max(text[LABEL_OFFENSIVE], media[LABEL_OFFENSIVE]),
    }
    thresholds = {
        LABEL_NSFW: settings.nsfw_threshold,
        LABEL_HATE: settings.hate_threshold,
        LABEL_OFFENSIVE: settings.offensive_threshold,
    }
    failed = [label for label, score in scores.items() if score >= thresholds[label]]
    for label, score in scores.items():
        ctx.output.scores[label] = round(score, 4)
        if label not in failed:
            continue
        where = "in its media" if label != LABEL_NSFW and media[label] > text[label] else ""
        if label == LABEL_NSFW:
            where = f"in {len(facts.nsfw)} image(s)/frame(s)"
        ctx.output.reasons[label] = (
            why_text or f"{label} score {score:.2f} >= {thresholds[label]:.2f} {where}".strip()
        )
    if not failed and not facts.unchecked:  # fail closed: unchecked media is never safe
        ctx.output.labels.append(LABEL_SAFE)
    else:
        ctx.output.labels.extend(failed)
    if facts.nsfw_model:
        ctx.output.model_versions["nsfw"] = facts.nsfw_model
    return failed


PLAN = Plan(
    Eligibility.POST_SAFETY.value,
    tasks={
        "filter": shared.filters,
        "rate_limit": shared.rate_limit,
        "media": shared.media_task,
        "post_text": post_text,
        "media_text": media_text,
        "classify": classify,
        "sink": shared.sink,
    },
    deps={
        "rate_limit": ["filter"],
        "media": ["rate_limit"],
        "post_text": ["rate_limit"],
        "media_text": ["media"],
        "classify": ["post_text", "media_text"],
        "sink": ["classify"],
    },
    eligibility=Eligibility.POST_SAFETY.value,
    version=VERSION,
)
