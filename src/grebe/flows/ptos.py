"""Safety PTOS: a two-step policy classifier.

Step 1 (`categories`) scores six categories — spam, hate, harassment, sexual, violence,
self-harm — each with a reason. Step 2 (`policy`) runs only for the categories that
matched (score >= the category's threshold) and picks the policy action for each:
locally from the configured score ladder, or by asking the chat model per category.
Labels: `<category>` for each match and `<category>:<action>` for each decision.
"""

from __future__ import annotations

import functools
import re

from grebe.core.plan import Plan
from grebe.core.task import TaskContext
from grebe.flows import language, llm, shared
from grebe.flows.services import MediaFacts
from grebe.flows.settings import PtosSettings
from grebe.types import Eligibility

VERSION = "1"
CATEGORIES = ("spam", "hate", "harassment", "sexual", "violence", "self_harm")
TARGETING = "targeting"
UNTARGETED_HARASSMENT_FACTOR = 0.6  # insults not aimed at anyone weigh less


@functools.lru_cache(maxsize=64)
def _pattern(phrases: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(p.strip()) for p in phrases if p.strip())
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)


def lexicon_hits(text: str, phrases: list[str]) -> list[str]:
    if not phrases:
        return []
    return [m.group(0).lower() for m in _pattern(tuple(phrases)).finditer(text)]


def lexicon_score(hits: list[str], hit_score: float) -> float:
    """One hit scores `hit_score`; each further distinct hit closes half the gap."""
    distinct = len(set(hits))
    return 0.0 if not distinct else 1.0 - (1.0 - hit_score) * 0.5 ** (distinct - 1)


def text_of(ctx: TaskContext) -> str:
    facts: MediaFacts = ctx.results["media"]
    return f"{ctx.payload.post.text}\n{facts.ocr_text}".strip()


TEXT_MODELS = "the spam, hate and offensive-language models"


async def spam(ctx: TaskContext) -> float:
    if shared.uses_llm(ctx) or await language.local_abstain(ctx, TEXT_MODELS):
        return 0.0
    return await shared.spam_head_score(ctx, text_of(ctx))


async def toxicity(ctx: TaskContext) -> dict[str, float]:
    if shared.uses_llm(ctx) or await language.local_abstain(ctx, TEXT_MODELS):
        return {"hate": 0.0, "offensive": 0.0}
    hate = await shared.hate_scores(ctx, text_of(ctx))
    profanity = await shared.offensive_score(ctx, text_of(ctx))
    return {"hate": hate.get("hate", 0.0),
            "offensive": max(profanity, hate.get("offensive", 0.0))}


def local_categories(ctx: TaskContext, settings: PtosSettings) -> dict[str, tuple[float, str]]:
    text, facts = text_of(ctx), ctx.results["media"]
    tox, lex = ctx.results["toxicity"], settings.lexicons
    hits = {name: lexicon_hits(text, lex.get(name, [])) for name in (*CATEGORIES, TARGETING)}
    targeted = bool(hits[TARGETING]) or "@" in text
    harassment = tox["offensive"] * (1.0 if targeted else UNTARGETED_HARASSMENT_FACTOR)
    sexual_words = lexicon_score(hits["sexual"], settings.lexicon_hit_score)

    def words(name: str) -> tuple[float, str]:
        found = sorted(set(hits[name]))
        return (lexicon_score(found, settings.lexicon_hit_score),
                f"matched {', '.join(repr(w) for w in found)}" if found else "no matching terms")

    return {
        "spam": (ctx.results["spam"], f"spam head {ctx.results['spam']:.2f}"),
        "hate": (tox["hate"], f"hate model {tox['hate']:.2f}"),
        "harassment": (harassment, f"offensive {tox['offensive']:.2f}, "
                       + ("aimed at someone" if targeted else "not aimed at anyone")),
        "sexual": (max(facts.max_nsfw, sexual_words),
                   f"nsfw {facts.max_nsfw:.2f}, {words('sexual')[1]}"),
        "violence": words("violence"),
        "self_harm": words("self_harm"),
    }


async def categories(ctx: TaskContext) -> dict[str, float]:
    """Step 1: every category's score and reason; returns the matched ones."""
    settings: PtosSettings = shared.settings_of(ctx)
    if ctx.services.settings.backend(ctx.plan) == "llm":
        facts: MediaFacts = ctx.results["media"]
        answer = await llm.ask(ctx, "ptos_categories", llm.PtosCategories,
                               text=ctx.payload.post.text, ocr_text=facts.ocr_text or "(none)")
        scored = {c: (getattr(answer, c).score, getattr(answer, c).reason) for c in CATEGORIES}
    else:
        scored = local_categories(ctx, settings)
        why_not = await language.local_abstain(ctx, TEXT_MODELS)
        if why_not:  # only what does not read the text (the NSFW image score) stays
            facts = ctx.results["media"]
            scored = {c: (0.0, why_not) for c in CATEGORIES}
            scored["sexual"] = (facts.max_nsfw, f"nsfw {facts.max_nsfw:.2f}; {why_not}")
            ctx.output.labels.append(language.LABEL_ABSTAIN)
            ctx.output.reasons[language.LABEL_ABSTAIN] = why_not
    matched = {}
    for category, (score, reason) in scored.items():
        ctx.output.scores[f"ptos.{category}"] = round(score, 4)
        if score >= settings.category_thresholds.get(category, 1.0):
            matched[category] = score
            ctx.output.labels.append(category)
            ctx.output.reasons[f"ptos.{category}"] = reason
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
