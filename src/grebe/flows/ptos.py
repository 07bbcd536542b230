"""Safety PTOS: a two-step policy classifier with cross-checks.

Step 1 (`categories`) scores ten categories — spam, hate, harassment, sexual, violence,
self-harm, child safety, violent extremism, civic integrity, illegal/regulated goods —
each with a reason (grebe.flows.ptos_depth for the last four: two signals each).
`cross_check` asks a second reader about child safety (a second prompt, or locally the
media/heads signals) and cross-validates sexual text against the NSFW image score:
a disagreement is labelled `needs_review` with its reason, never dropped. Step 2
(`policy`) runs only for the matched categories and picks the action of the matched
subtype's rules, escalated for an author with an enforcement history: locally from the
score ladder, or by asking the chat model per category.
Labels: `<category>` per match, `<category>.<subtype>` when a subtype matched,
`<category>:<action>` per decision (`<category>:review` when the readers disagree).
"""

from __future__ import annotations

from typing import Any

import msgspec

from grebe.core.plan import Plan
from grebe.core.task import TaskContext
from grebe.flows import language, llm, modes, shared, verdict_memo
from grebe.flows.catalog import Flow
from grebe.flows.enforcement import EnforcementHistory
from grebe.flows.policy import RESTRICTIVE_ACTIONS
from grebe.flows.ptos_depth import (
    CHILD_SAFETY,
    DEPTH_CATEGORIES,
    LABEL_NEEDS_REVIEW,
    REVIEW_PREFIX,
    SEXUAL,
    CrossCheck,
    depth_categories,
    disagreement,
    local_child_safety_check,
    sexual_cross_validation,
    subtype_of,
)
from grebe.flows.ptos_rules import Scored
from grebe.flows.ptos_rules import legacy as legacy_categories
from grebe.flows.ptos_rules import with_heads as head_categories
from grebe.flows.services import MediaFacts
from grebe.flows.settings import FlowSettings, PolicyRule, PtosSettings
from grebe.flows.sinks import SinkRules, sink_with
from grebe.stores.base import AnnotationStore

VERSION = "1"
NAME = "safety_ptos"  # the plan, its eligibility and its `plans.` key
ENFORCEMENT_SERVICE = "enforcement"  # the flow's EnforcementHistory in ctx.services
LABEL_ONLY = "label"  # the mildest action: a label, nothing taken away
REVIEW = "review"  # the action when two readers disagree: a person decides
CATEGORIES = ("spam", "hate", "harassment", "sexual", "violence", "self_harm",
              *DEPTH_CATEGORIES)


class CategoryScore(msgspec.Struct):
    score: llm.Unit
    reason: str


class PtosCategories(msgspec.Struct):
    spam: CategoryScore
    hate: CategoryScore
    harassment: CategoryScore
    sexual: CategoryScore
    violence: CategoryScore
    self_harm: CategoryScore
    child_safety: CategoryScore
    violent_extremism: CategoryScore
    civic_integrity: CategoryScore
    illegal_goods: CategoryScore


class ChildSafetyCheck(msgspec.Struct):
    """The second, independent child-safety reader (its own prompt)."""

    violation: bool
    reason: str


def policy_schema(actions: list[str]) -> dict[str, Any]:
    """Policy actions come from config, so this schema is built as data."""
    return {
        "title": "PolicyDecision",
        "type": "object",
        "properties": {"action": {"type": "string", "enum": actions},
                       "reason": {"type": "string"}},
        "required": ["action", "reason"],
    }


def text_of(ctx: TaskContext) -> str:
    facts: MediaFacts = ctx.results["media"]
    return f"{ctx.payload.post.text}\n{facts.ocr_text}".strip()


TEXT_MODELS = "the spam, hate and offensive-language models"


async def spam(ctx: TaskContext) -> float:
    if ctx.services.models.heads is not None and not shared.uses_llm(ctx):
        await verdict_memo.verdicts(ctx, text_of(ctx))  # one embedding, every head, memoised
        return 0.0
    if shared.uses_llm(ctx) or await language.local_abstain(ctx, TEXT_MODELS):
        return 0.0
    return await shared.spam_head_score(ctx, text_of(ctx))


async def toxicity(ctx: TaskContext) -> dict[str, float]:
    if (shared.uses_llm(ctx) or ctx.services.models.heads is not None
            or await language.local_abstain(ctx, TEXT_MODELS)):
        return {"hate": 0.0, "offensive": 0.0}
    hate = await shared.hate_scores(ctx, text_of(ctx))
    profanity = await shared.offensive_score(ctx, text_of(ctx))
    return {"hate": hate.get("hate", 0.0),
            "offensive": max(profanity, hate.get("offensive", 0.0))}


async def local_categories(ctx: TaskContext, settings: PtosSettings) -> dict[str, Scored]:
    """Step 1 on the local models: the heads when loaded, else the pre-heads models; a
    post in a language they do not cover keeps only what does not read its text."""
    text, facts = text_of(ctx), ctx.results["media"]
    if ctx.services.models.heads is not None:
        found = await verdict_memo.verdicts(ctx, text)
        abstained = [v.reason for v in found.values() if v.abstained]
        why_not = abstained[0] if abstained else None
        scored = head_categories(ctx, settings, text, found)
    else:
        why_not = await language.local_abstain(ctx, TEXT_MODELS)
        scored = legacy_categories(ctx, settings, text)
    scored.update(depth_categories(text, settings))
    if why_not:
        scored = {c: (0.0, why_not, False) for c in CATEGORIES}
        limit = settings.category_thresholds.get("sexual", 1.0)
        scored["sexual"] = (facts.max_nsfw, f"nsfw {facts.max_nsfw:.2f}; {why_not}",
                            facts.max_nsfw >= limit)
        ctx.output.labels.append(language.LABEL_ABSTAIN)
        ctx.output.reasons[language.LABEL_ABSTAIN] = why_not
    return scored


async def categories(ctx: TaskContext) -> dict[str, float]:
    """Step 1: every category's score and reason; returns the matched ones."""
    settings: PtosSettings = shared.settings_of(ctx)
    scored: dict[str, Scored]
    if ctx.services.settings.backend(ctx.plan) == "llm":
        facts: MediaFacts = ctx.results["media"]
        answer = await llm.ask(ctx, "ptos_categories", PtosCategories,
                               text=ctx.payload.post.text, ocr_text=facts.ocr_text or "(none)")
        scored = {}
        for c in CATEGORIES:
            score, reason = getattr(answer, c).score, getattr(answer, c).reason
            scored[c] = (score, reason, score >= settings.category_thresholds.get(c, 1.0))
    else:
        scored = await local_categories(ctx, settings)
    ctx.output.reasons[modes.MODE_REASON_KEY] = ctx.payload.mode
    if modes.deluxe_recheck(ctx.payload) and not scored[SEXUAL][2]:
        nsfw = ctx.results["media"].max_nsfw
        if nsfw >= settings.deluxe_sexual_threshold:
            scored[SEXUAL] = (nsfw, f"deluxe recheck ({modes.HIGH_FAV_THRESHOLD}+ likes, media):"
                              f" nsfw {nsfw:.2f} >= {settings.deluxe_sexual_threshold:.2f}", True)
    matched = {}
    for category, (score, reason, hit) in scored.items():
        ctx.output.scores[f"ptos.{category}"] = round(score, 4)
        if hit:
            matched[category] = score
            ctx.output.labels.append(category)
            ctx.output.reasons[f"ptos.{category}"] = reason
        elif score > 0:
            ctx.output.reasons[f"ptos.{category}"] = f"not matched: {reason}"
    return matched


def flag_review(ctx: TaskContext, category: str, why: str) -> None:
    if LABEL_NEEDS_REVIEW not in ctx.output.labels:
        ctx.output.labels.append(LABEL_NEEDS_REVIEW)
    ctx.output.reasons[f"{REVIEW_PREFIX}{category}"] = why


async def cross_check(ctx: TaskContext) -> dict[str, str]:
    """Child safety by a second reader, and sexual text against the images: each
    disagreement ({category: why}) goes to review."""
    settings: PtosSettings = shared.settings_of(ctx)
    text, facts = text_of(ctx), ctx.results["media"]
    score = ctx.output.scores.get(f"ptos.{CHILD_SAFETY}", 0.0)
    matched = CHILD_SAFETY in ctx.results["categories"]
    first: Scored = (score, ctx.output.reasons.get(f"ptos.{CHILD_SAFETY}", "no matching terms"),
                     matched)
    second: CrossCheck | None = None
    if ctx.services.settings.backend(ctx.plan) == "llm":
        if matched or score >= settings.child_safety_check_floor:
            answer = await llm.ask(ctx, "ptos_child_safety_check", ChildSafetyCheck,
                                   text=ctx.payload.post.text,
                                   ocr_text=facts.ocr_text or "(none)")
            second = CrossCheck(answer.violation, f"second prompt: {answer.reason}")
    else:
        second = local_child_safety_check(text, facts, settings,
                                          await verdict_memo.verdicts(ctx, text))
    review: dict[str, str] = {}
    why = disagreement(CHILD_SAFETY, first, second) if second is not None else None
    if why:
        review[CHILD_SAFETY] = why
    elif second is not None and matched:
        ctx.output.reasons[f"ptos.{CHILD_SAFETY}"] += f"; confirmed: {second.reason}"
    sexual_why = sexual_cross_validation(text, facts, settings)
    if sexual_why:
        review[SEXUAL] = sexual_why
    for category, reason in review.items():
        flag_review(ctx, category, reason)
    return review


def rules_for(settings: PtosSettings, category: str, subtype: str | None) -> list[PolicyRule]:
    """The subtype's own rules when it has any, else the category's general ones;
    strictest (highest min_score) first."""
    every = settings.policies.get(category, [])
    own = [r for r in every if subtype is not None and r.subtype == subtype]
    return sorted(own or [r for r in every if r.subtype is None], key=lambda r: -r.min_score)


async def escalation(ctx: TaskContext, settings: PtosSettings, category: str) -> str | None:
    """Why the author's enforcement history calls for the strictest action, or None."""
    history = ctx.services.contribution(ENFORCEMENT_SERVICE)
    if history is None:
        return None
    conf = settings.enforcement_history
    post = ctx.payload.post
    prior = await history.prior(post.author_id, category, post.id)
    if len(prior) < conf.escalate_after:
        return None
    return (f"escalated: author has {len(prior)} prior {category} action(s) within "
            f"{conf.window_s:g}s (>= {conf.escalate_after})")


async def policy(ctx: TaskContext) -> dict[str, str]:
    """Step 2, only for matched categories: the action the policy calls for; a category
    whose readers disagreed is left to review."""
    settings: PtosSettings = shared.settings_of(ctx)
    text, facts = text_of(ctx), ctx.results["media"]
    decisions: dict[str, str] = {}
    review = ctx.results["cross_check"]
    if CHILD_SAFETY in review:
        decisions[CHILD_SAFETY] = REVIEW
        ctx.output.labels.append(f"{CHILD_SAFETY}:{REVIEW}")
        ctx.output.reasons[f"policy.{CHILD_SAFETY}"] = f"{REVIEW}: {review[CHILD_SAFETY]}"
    for category, score in ctx.results["categories"].items():
        if category in decisions:
            continue
        subtype = subtype_of(category, text, facts, settings)
        if subtype is not None:
            ctx.output.labels.append(f"{category}.{subtype}")
        rules = rules_for(settings, category, subtype)
        if not rules:
            continue
        escalate = await escalation(ctx, settings, category)
        if ctx.services.settings.backend(ctx.plan) == "llm":
            actions = [r.action for r in rules]
            answer = await llm.ask(
                ctx, "ptos_policy", policy_schema(actions), category=category,
                score=f"{score:.2f}", reason=ctx.output.reasons[f"ptos.{category}"],
                actions=", ".join(actions), text=ctx.payload.post.text,
            )
            action, why = answer["action"], answer["reason"]
            if escalate:
                action, why = rules[0].action, f"{why}; {escalate}"
        else:
            rule = next((r for r in rules if score >= r.min_score), rules[-1])
            action, why = rule.action, f"score {score:.2f} >= {rule.min_score:.2f}"
            if escalate:
                action, why = rules[0].action, f"{why}; {escalate}"
            found = await language.guess(ctx)
            if action in RESTRICTIVE_ACTIONS and found.code is None:
                # Models misread short texts of unknown language: no remove/limit on them.
                milder = next((r.action for r in rules if r.action not in RESTRICTIVE_ACTIONS),
                              LABEL_ONLY)
                why = f"{why}; {action} capped to {milder}: language {found.describe()}"
                action = milder
        if subtype is not None:
            why = f"subtype {subtype}; {why}"
        decisions[category] = action
        ctx.output.labels.append(f"{category}:{action}")
        ctx.output.reasons[f"policy.{category}"] = f"{action}: {why}"
        history = ctx.services.contribution(ENFORCEMENT_SERVICE)
        if history is not None and action != LABEL_ONLY:
            await history.record(ctx.payload.post.author_id,
                                 ctx.payload.post.id, category, action)
    return decisions


PLAN = Plan(
    NAME,
    tasks={
        "filter": shared.filters,
        "rate_limit": shared.rate_limit,
        "media": shared.media_task,
        "spam": spam,
        "toxicity": toxicity,
        "categories": categories,
        "cross_check": cross_check,
        "policy": policy,
        "sink": sink_with(SinkRules(post_flags=frozenset({*CATEGORIES, LABEL_NEEDS_REVIEW}))),
    },
    deps={
        "rate_limit": ["filter"],
        "media": ["rate_limit"],
        "spam": ["media"],
        "toxicity": ["media"],
        "categories": ["spam", "toxicity"],
        "cross_check": ["categories"],
        "policy": ["cross_check"],
        "sink": ["policy"],
    },
    eligibility=NAME,
    version=VERSION,
)

def _services(settings: FlowSettings, store: AnnotationStore) -> dict[str, Any]:
    history = settings.plan(NAME).enforcement_history
    return {ENFORCEMENT_SERVICE: EnforcementHistory(
        store, entries_per_author=history.entries_per_author, window_s=history.window_s)}


FLOW = Flow(plan=PLAN, settings=PtosSettings, order=30, services=_services, prelude=spam)
