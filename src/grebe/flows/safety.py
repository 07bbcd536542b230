"""Post safety: is this post hateful, offensive or sexual?

Local classifier, with the trained text heads (grebe.flows.judge): target-aware labels
`offensive`, `insult` (aimed at a person), `hate` (at an identity group) and `threat` on
the post text and, separately, on the text found in its media (OCR, transcript); without
heads, the hate/offensive model and the profanity model. The NSFW image model on every
image and sampled video frame. A post is labelled by every check it fails, or `safe`
(`abstain` when its language is outside the text models' and nothing else failed) — but
never `safe` when some media item went unchecked (then `media_unchecked`, added by the
media task, says why).
"""

from __future__ import annotations

import msgspec

from grebe.core.plan import Plan
from grebe.core.task import TaskContext
from grebe.flows import judge, language, llm, shared, verdict_memo
from grebe.flows.catalog import Flow
from grebe.flows.services import MediaFacts
from grebe.flows.settings import SafetySettings
from grebe.flows.sinks import SinkRules, sink_with

VERSION = "1"
NAME = "post_safety"  # the plan, its eligibility and its `plans.` key
LABEL_SAFE = "safe"
LABEL_NSFW = "nsfw"
LABEL_HATE = "hate"
LABEL_OFFENSIVE = "offensive"
LABEL_INSULT = judge.INSULT
LABEL_THREAT = judge.THREAT
#: What the heads can label, most severe first.
HEAD_LABELS = (judge.THREAT, judge.HATE, judge.INSULT, judge.OFFENSIVE)


class SafetyVerdict(msgspec.Struct):
    hate: llm.Unit
    offensive: llm.Unit
    reason: str


async def text_scores(ctx: TaskContext, text: str) -> dict[str, float]:
    if not text.strip():
        return {LABEL_HATE: 0.0, LABEL_OFFENSIVE: 0.0}
    hate = await shared.hate_scores(ctx, text)
    profanity = await shared.offensive_score(ctx, text)
    return {
        LABEL_HATE: hate.get(LABEL_HATE, 0.0),
        LABEL_OFFENSIVE: max(profanity, hate.get(LABEL_OFFENSIVE, 0.0)),
    }


TEXT_MODELS = "the hate and offensive-language models"


async def post_text(ctx: TaskContext) -> dict[str, float]:
    """The post text's scores; zeros when the models do not cover its language (media
    text is OCR'd and transcribed by English models, so it is scored as English)."""
    if ctx.services.models.heads is not None and not shared.uses_llm(ctx):
        found = await verdict_memo.verdicts(ctx, ctx.payload.post.text)
        return {name: v.score for name, v in found.items()}
    if shared.uses_llm(ctx) or await language.local_abstain(ctx, TEXT_MODELS):
        return {LABEL_HATE: 0.0, LABEL_OFFENSIVE: 0.0}
    return await text_scores(ctx, ctx.payload.post.text)


async def media_text(ctx: TaskContext) -> dict[str, float]:
    facts: MediaFacts = ctx.results["media"]
    if shared.uses_llm(ctx):  # the chat model reads the media text itself
        return {LABEL_HATE: 0.0, LABEL_OFFENSIVE: 0.0}
    text = f"{facts.ocr_text}\n{facts.transcript}"
    if ctx.services.models.heads is not None:
        found = await verdict_memo.verdicts(ctx, text, gate=False)
        return {name: v.score for name, v in found.items()}
    return await text_scores(ctx, text)


def verdict_labels(failed: list[str], abstained: bool, facts: MediaFacts) -> list[str]:
    """The failed checks; else `abstain` when the text models abstained; else `safe` —
    never `safe` with unchecked media (fail closed: `media_unchecked` says why)."""
    if failed:
        return failed
    if abstained:
        return [language.LABEL_ABSTAIN]
    return [] if facts.unchecked else [LABEL_SAFE]


async def classify_heads(ctx: TaskContext, settings: SafetySettings) -> list[str]:
    """Target-aware labels from the heads (grebe.flows.judge): `offensive` for profanity,
    `insult` when it is aimed at a person, `hate`, `threat`; each from the post text or
    the text in its media, whichever fired; `nsfw` from the image model."""
    facts: MediaFacts = ctx.results["media"]
    post = await verdict_memo.verdicts(ctx, ctx.payload.post.text)
    media = await verdict_memo.verdicts(ctx, f"{facts.ocr_text}\n{facts.transcript}", gate=False)
    failed: list[str] = []
    if facts.max_nsfw >= settings.nsfw_threshold:
        failed.append(LABEL_NSFW)
        ctx.output.reasons[LABEL_NSFW] = (f"nsfw score {facts.max_nsfw:.2f} >= "
                                          f"{settings.nsfw_threshold:.2f} in {len(facts.nsfw)} "
                                          "image(s)/frame(s)")
    ctx.output.scores[LABEL_NSFW] = round(facts.max_nsfw, 4)
    for name in HEAD_LABELS:
        found = [(where, v) for where, v in (("", post.get(name)), (" in its media",
                                             media.get(name))) if v is not None]
        if not found:
            continue
        ctx.output.scores[name] = round(max(v.score for _, v in found), 4)
        fired = [(where, v) for where, v in found if v.fired]
        if fired:
            failed.append(name)
            where, v = fired[0]
            ctx.output.reasons[name] = f"{v.reason}{where}"
    abstained = [v.reason for v in post.values() if v.abstained]
    if abstained:
        ctx.output.reasons[language.LABEL_ABSTAIN] = abstained[0]
    ctx.output.labels.extend(verdict_labels(failed, bool(abstained), facts))
    if facts.nsfw_model:
        ctx.output.model_versions["nsfw"] = facts.nsfw_model
    return failed


async def classify(ctx: TaskContext) -> list[str]:
    settings: SafetySettings = shared.settings_of(ctx)
    facts: MediaFacts = ctx.results["media"]
    if ctx.services.models.heads is not None and not shared.uses_llm(ctx):
        return await classify_heads(ctx, settings)
    if ctx.services.settings.backend(ctx.plan) == "llm":
        verdict = await llm.ask(
            ctx, "safety", SafetyVerdict, text=ctx.payload.post.text,
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
    why_not = await language.local_abstain(ctx, TEXT_MODELS)
    if why_not:
        ctx.output.reasons[language.LABEL_ABSTAIN] = why_not
    ctx.output.labels.extend(verdict_labels(failed, bool(why_not), facts))
    if facts.nsfw_model:
        ctx.output.model_versions["nsfw"] = facts.nsfw_model
    return failed


PLAN = Plan(
    NAME,
    tasks={
        "filter": shared.filters,
        "rate_limit": shared.rate_limit,
        "media": shared.media_task,
        "post_text": post_text,
        "media_text": media_text,
        "classify": classify,
        # Grox: no output topic for post safety; its flags are OR-merged into the post.
        "sink": sink_with(SinkRules(publish=False, post_flags=frozenset(
            {LABEL_NSFW, LABEL_HATE, LABEL_INSULT, LABEL_THREAT,
             shared.LABEL_MEDIA_UNCHECKED}))),
    },
    deps={
        "rate_limit": ["filter"],
        "media": ["rate_limit"],
        "post_text": ["rate_limit"],
        "media_text": ["media"],
        "classify": ["post_text", "media_text"],
        "sink": ["classify"],
    },
    eligibility=NAME,
    version=VERSION,
)

FLOW = Flow(plan=PLAN, settings=SafetySettings, order=20, prelude=post_text)
