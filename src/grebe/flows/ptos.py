"""Safety PTOS: a two-step policy classifier.

Step 1 (`categories`) scores six categories — spam, hate, harassment, sexual, violence,
self-harm — each with a reason. Step 2 (`policy`) runs only for the categories that
matched (score >= the category's threshold) and picks the policy action for each:
locally from the configured score ladder, or by asking the chat model per category.
Labels: `<category>` for each match and `<category>:<action>` for each decision.
"""

from __future__ import annotations

from grebe.core.plan import Plan
from grebe.core.task import TaskContext
from grebe.flows import judge, language, llm, shared
from grebe.flows.policy import RESTRICTIVE_ACTIONS
from grebe.flows.ptos_rules import Scored
from grebe.flows.ptos_rules import legacy as legacy_categories
from grebe.flows.ptos_rules import with_heads as head_categories
from grebe.flows.services import MediaFacts
from grebe.flows.settings import PtosSettings
from grebe.types import Eligibility

VERSION = "1"
LABEL_ONLY = "label"  # the mildest action: a label, nothing taken away
CATEGORIES = ("spam", "hate", "harassment", "sexual", "violence", "self_harm")


def text_of(ctx: TaskContext) -> str:
    facts: MediaFacts = ctx.results["media"]
    return f"{ctx.payload.post.text}\n{facts.ocr_text}".strip()


TEXT_MODELS = "the spam, hate and offensive-language models"


async def spam(ctx: TaskContext) -> float:
    if ctx.services.heads is not None and not shared.uses_llm(ctx):
        await judge.verdicts(ctx, text_of(ctx))  # one embedding, every head, memoised
        return 0.0
    if shared.uses_llm(ctx) or await language.local_abstain(ctx, TEXT_MODELS):
        return 0.0
    return await shared.spam_head_score(ctx, text_of(ctx))


async def toxicity(ctx: TaskContext) -> dict[str, float]:
    if (shared.uses_llm(ctx) or ctx.services.heads is not None
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
    if ctx.services.heads is not None:
        found = await judge.verdicts(ctx, text)
        abstained = [v.reason for v in found.values() if v.abstained]
        why_not = abstained[0] if abstained else None
        scored = head_categories(ctx, settings, text, found)
    else:
        why_not = await language.local_abstain(ctx, TEXT_MODELS)
        scored = legacy_categories(ctx, settings, text)
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
        answer = await llm.ask(ctx, "ptos_categories", llm.PtosCategories,
                               text=ctx.payload.post.text, ocr_text=facts.ocr_text or "(none)")
        scored = {}
        for c in CATEGORIES:
            score, reason = getattr(answer, c).score, getattr(answer, c).reason
            scored[c] = (score, reason, score >= settings.category_thresholds.get(c, 1.0))
    else:
        scored = await local_categories(ctx, settings)
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


async def policy(ctx: TaskContext) -> dict[str, str]:
    """Step 2, only for matched categories: the action the policy calls for."""
    settings: PtosSettings = shared.settings_of(ctx)
    decisions: dict[str, str] = {}
    for category, score in ctx.results["categories"].items():
        rules = sorted(settings.policies.get(category, []), key=lambda r: -r.min_score)
        if not rules:
            continue
        if ctx.services.settings.backend(ctx.plan) == "llm":
            actions = [r.action for r in rules]
            answer = await llm.ask(
                ctx, "ptos_policy", llm.policy_schema(actions), category=category,
                score=f"{score:.2f}", reason=ctx.output.reasons[f"ptos.{category}"],
                actions=", ".join(actions), text=ctx.payload.post.text,
            )
            action, why = answer["action"], answer["reason"]
        else:
            rule = next((r for r in rules if score >= r.min_score), rules[-1])
            action, why = rule.action, f"score {score:.2f} >= {rule.min_score:.2f}"
            found = await language.guess(ctx)
            if action in RESTRICTIVE_ACTIONS and found.code is None:
                # Models misread short texts of unknown language: no remove/limit on them.
                milder = next((r.action for r in rules if r.action not in RESTRICTIVE_ACTIONS),
                              LABEL_ONLY)
                why = f"{why}; {action} capped to {milder}: language {found.describe()}"
                action = milder
        decisions[category] = action
        ctx.output.labels.append(f"{category}:{action}")
        ctx.output.reasons[f"policy.{category}"] = f"{action}: {why}"
    return decisions


PLAN = Plan(
    Eligibility.SAFETY_PTOS.value,
    tasks={
        "filter": shared.filters,
        "rate_limit": shared.rate_limit,
        "media": shared.media_task,
        "spam": spam,
        "toxicity": toxicity,
        "categories": categories,
        "policy": policy,
        "sink": shared.sink,
    },
    deps={
        "rate_limit": ["filter"],
        "media": ["rate_limit"],
        "spam": ["media"],
        "toxicity": ["media"],
        "categories": ["spam", "toxicity"],
        "policy": ["categories"],
        "sink": ["policy"],
    },
    eligibility=Eligibility.SAFETY_PTOS.value,
    version=VERSION,
)
