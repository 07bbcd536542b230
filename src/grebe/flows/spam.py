"""Spam comment: is this post or comment spam?

Local classifier, with the trained text heads (grebe.flows.judge): the `spam` head at its
policy or validation threshold, or the one cheap-signal rule strong alone (the same text
with links posted again and again by one author). Without heads (pre-heads builds): the
e-mail spam head, the offensive-language model and cheap signals (links, shouting,
repetition, duplicates) in a weighted noisy-or. Either way the models abstain
(`abstain`, reason `unsupported_language`) on a post in a language they do not cover.
Text read from attached images (OCR) is scored with the post text: image spam is spam.

Replies first pass the reply filter (grebe.flows.thread): no self-replies, no replies to
the platform's own bot accounts, only threads up to the follower limits (bigger ones are
reply ranking's). Every post is also checked for coordination (grebe.flows.coordination):
the same text from `min_accounts` accounts within the window is `coordinated_spam`, and
spam, whatever the classifier said about the one post.
"""

from __future__ import annotations

from typing import Any

import msgspec

from grebe.core.plan import Plan
from grebe.core.task import SkipTask, TaskContext
from grebe.flows import judge, language, llm, shared, verdict_memo
from grebe.flows.catalog import Flow
from grebe.flows.coordination import Campaign, CoordinationIndex
from grebe.flows.services import MediaFacts
from grebe.flows.settings import FlowSettings, SpamSettings
from grebe.flows.sinks import SinkRules, sink_with
from grebe.flows.text_signals import TextSignals, text_signals
from grebe.flows.thread import spam_reply_skip, thread_facts
from grebe.stores.base import AnnotationStore

VERSION = "1"
NAME = "spam_comment"  # the plan, its eligibility and its `plans.` key
COORDINATION_SERVICE = "coordination"  # the flow's CoordinationIndex in ctx.services
LABEL_SPAM = "spam"
LABEL_NOT_SPAM = "not_spam"
LABEL_COORDINATED = "coordinated_spam"


class SpamVerdict(msgspec.Struct):
    spam: bool
    score: llm.Unit
    reason: str


async def reply_filter(ctx: TaskContext) -> None:
    """Skip, before any model runs, the replies this plan does not judge."""
    if not ctx.payload.post.is_reply:
        return
    settings: SpamSettings = shared.settings_of(ctx)
    why = spam_reply_skip(thread_facts(ctx.payload), settings.reply_filter)
    if why:
        raise SkipTask(why)


async def coordination(ctx: TaskContext) -> Campaign | None:
    """How many accounts posted this text (near-identical) within the window."""
    index = ctx.services.contribution(COORDINATION_SERVICE)
    if index is None:
        return None
    post = ctx.payload.post
    return index.observe(post.id, post.author_id, full_text(ctx))  # type: ignore[no-any-return]


def full_text(ctx: TaskContext) -> str:
    facts: MediaFacts = ctx.results["media"]
    post_text = ctx.payload.post.text
    return f"{post_text}\n{facts.ocr_text}".strip() if facts.ocr_text else post_text


async def abstain(ctx: TaskContext) -> str | None:
    """Why the local text models may not judge this post (its language), or None."""
    return await language.local_abstain(ctx, "the spam models",
                                        judge.languages_of(ctx, judge.SPAM))


async def head(ctx: TaskContext) -> float:
    if shared.uses_llm(ctx) or await abstain(ctx):
        return 0.0
    if ctx.services.models.heads is not None:
        return (await verdict_memo.verdicts(ctx, full_text(ctx)))[judge.SPAM].score
    return await shared.spam_head_score(ctx, full_text(ctx))


async def offensive(ctx: TaskContext) -> float:
    """The offensive part of the pre-heads noisy-or (the heads' spam head needs none:
    offensiveness is not spam)."""
    if shared.uses_llm(ctx) or ctx.services.models.heads is not None or await abstain(ctx):
        return 0.0
    return await shared.offensive_score(ctx, full_text(ctx))


async def signals(ctx: TaskContext) -> TextSignals | None:
    if shared.uses_llm(ctx):
        return None
    settings: SpamSettings = shared.settings_of(ctx)
    post = ctx.payload.post
    return text_signals(
        full_text(ctx), author_id=post.author_id, post_id=post.id,
        memory=ctx.services.authors, shouting_min_letters=settings.shouting_min_letters,
        repetition_min_tokens=settings.repetition_min_tokens,
    )


def signal_strength(sig: TextSignals, settings: SpamSettings) -> tuple[float, str]:
    """The strongest cheap signal in [0, 1] and what it was."""
    candidates = {
        f"{sig.links} link(s)": min(1.0, sig.links / settings.links_saturation),
        f"{sig.shouting:.0%} upper case": max(0.0, (sig.shouting - 0.5) * 2),
        f"{sig.repetition:.0%} repeated words": sig.repetition,
        f"same text posted {sig.duplicates} time(s) before by the author": min(
            1.0, sig.duplicates / settings.duplicate_saturation
        ),
    }
    reason = max(candidates, key=candidates.__getitem__)
    return candidates[reason], reason


def repeated_links(sig: TextSignals, settings: SpamSettings) -> str | None:
    """The one cheap-signal rule strong enough alone: the same text with links, posted
    again and again by one author."""
    if sig.links and sig.duplicates >= settings.duplicate_saturation:
        return (f"rule: same text with {sig.links} link(s) posted {sig.duplicates} time(s) "
                "before by the author")
    return None


async def with_heads(ctx: TaskContext, settings: SpamSettings) -> tuple[float, str, bool]:
    """The spam head at its (policy or validation) threshold, or the repeated-links rule."""
    verdict = (await verdict_memo.verdicts(ctx, full_text(ctx)))[judge.SPAM]
    rule = repeated_links(ctx.results["signals"], settings)
    reason = "; ".join(r for r in (verdict.reason, rule) if r)
    return verdict.score, reason, verdict.fired or rule is not None


def combine(head_p: float, sig: TextSignals, offensive_p: float,
            settings: SpamSettings) -> tuple[float, str]:
    """Noisy-or of the weighted parts, and a reason naming the ones that mattered."""
    strength, signal_reason = signal_strength(sig, settings)
    parts = {
        f"spam head {head_p:.2f}": settings.head_weight * head_p,
        f"{signal_reason}": settings.signals_weight * strength,
        f"offensive {offensive_p:.2f}": settings.offensive_weight * offensive_p,
    }
    miss = 1.0
    for value in parts.values():
        miss *= 1.0 - value
    ranked = sorted((p for p in parts.items() if p[1] > 0.05), key=lambda p: -p[1])
    return 1.0 - miss, "; ".join(name for name, _ in ranked) or "no spam signal"


def flag_coordination(ctx: TaskContext, settings: SpamSettings) -> bool:
    """Label a coordinated post (whatever its language: no text model is involved)."""
    campaign: Campaign | None = ctx.results["coordination"]
    if campaign is None or campaign.accounts < settings.coordination.min_accounts:
        return False
    ctx.output.labels.append(LABEL_COORDINATED)
    ctx.output.scores[LABEL_COORDINATED] = float(campaign.accounts)
    ctx.output.reasons[LABEL_COORDINATED] = (
        f"near-identical text from {campaign.accounts} accounts within "
        f"{settings.coordination.window_s:g}s (>= {settings.coordination.min_accounts}); "
        f"e.g. posts {', '.join(campaign.posts)}")
    return True


async def classify(ctx: TaskContext) -> float:
    settings: SpamSettings = shared.settings_of(ctx)
    coordinated = flag_coordination(ctx, settings)
    why_not = await abstain(ctx)
    if why_not:
        ctx.output.labels.append(language.LABEL_ABSTAIN)
        ctx.output.reasons[LABEL_SPAM] = why_not
        if coordinated:
            ctx.output.labels.append(LABEL_SPAM)
        return 0.0
    if ctx.services.settings.backend(ctx.plan) == "llm":
        # The model's yes/no decides the label; its score is reported as given.
        verdict = await llm.ask(ctx, "spam", SpamVerdict, text=full_text(ctx))
        score, reason, is_spam = verdict.score, verdict.reason, verdict.spam
    elif ctx.services.models.heads is not None:
        score, reason, is_spam = await with_heads(ctx, settings)
    else:
        score, reason = combine(ctx.results["head"], ctx.results["signals"],
                                ctx.results["offensive"], settings)
        is_spam = score >= settings.threshold
    is_spam = is_spam or coordinated
    ctx.output.labels.append(LABEL_SPAM if is_spam else LABEL_NOT_SPAM)
    ctx.output.scores[LABEL_SPAM] = round(score, 4)
    ctx.output.reasons[LABEL_SPAM] = reason
    return score


PLAN = Plan(
    NAME,
    tasks={
        "filter": shared.filters,
        "reply_filter": reply_filter,
        "rate_limit": shared.rate_limit,
        "media": shared.media_task,
        "head": head,
        "offensive": offensive,
        "signals": signals,
        "coordination": coordination,
        "classify": classify,
        "sink": sink_with(SinkRules(post_flags=frozenset({LABEL_SPAM, LABEL_COORDINATED}),
                                    author_flags=frozenset({LABEL_COORDINATED}))),
    },
    deps={
        "reply_filter": ["filter"],
        "rate_limit": ["reply_filter"],
        "media": ["rate_limit"],
        "head": ["media"],
        "offensive": ["media"],
        "signals": ["media"],
        "coordination": ["media"],
        "classify": ["head", "offensive", "signals", "coordination"],
        "sink": ["classify"],
    },
    eligibility=NAME,
    version=VERSION,
)

def _services(settings: FlowSettings, store: AnnotationStore) -> dict[str, Any]:
    campaigns = settings.plan(NAME).coordination
    return {COORDINATION_SERVICE: CoordinationIndex(
        max_entries=campaigns.max_entries, window_s=campaigns.window_s,
        max_distance=campaigns.max_distance)}


FLOW = Flow(plan=PLAN, settings=SpamSettings, order=10, services=_services, prelude=head)
