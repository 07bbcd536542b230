"""Step 1 of the PTOS flow on the local models: each category's score, reason, and
whether it matched.

The rule that matters: **a word-list hit is never enough on its own.** "i have a shoot
saturday" is not violence, "migraine, you make me want to die." is not self-harm, and
"...hair falling out. Xxx" is not sexual. A word-list hit matches a category only with a
second, independent signal (a head or model score, or the NSFW image score); where no
labelled data exists for a category (self-harm, unless a `self_harm` head is loaded) the
second signal is a second distinct phrase. Model-only categories (spam, hate,
harassment) match on the model at its threshold.
"""

from __future__ import annotations

import functools
import re

from grebe.core.task import TaskContext
from grebe.flows import judge
from grebe.flows.services import MediaFacts
from grebe.flows.settings import PtosSettings

TARGETING = "targeting"
UNTARGETED_HARASSMENT_FACTOR = 0.6  # insults not aimed at anyone weigh less
#: score, reason, matched
Scored = tuple[float, str, bool]


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


def words_rule(hits: list[str], hit_score: float, second: str | None) -> Scored:
    """A word-list category: matched only with a `second` signal (its description), else
    the hit is reported but the category does not match."""
    found = sorted(set(hits))
    if not found:
        return 0.0, "no matching terms", False
    listed = f"matched {', '.join(repr(w) for w in found)}"
    if second is None:
        return lexicon_score(found, hit_score), f"{listed}; no second signal", False
    return lexicon_score(found, hit_score), f"{listed} and {second}", True


def _hits(text: str, settings: PtosSettings) -> dict[str, list[str]]:
    names = ("sexual", "violence", "self_harm", TARGETING)
    return {n: lexicon_hits(text, settings.lexicons.get(n, [])) for n in names}


def sexual_rule(hits: list[str], facts: MediaFacts, settings: PtosSettings,
                head: judge.Verdict | None) -> Scored:
    limit = settings.category_thresholds.get("sexual", 1.0)
    if facts.max_nsfw >= limit:
        return facts.max_nsfw, f"nsfw {facts.max_nsfw:.2f} in the media", True
    second = (f"nsfw {facts.max_nsfw:.2f} in the media" if facts.max_nsfw >= limit / 2
              else head.reason if head is not None and head.fired
              else "a second phrase" if len(set(hits)) > 1 else None)
    return words_rule(hits, settings.lexicon_hit_score, second)


def self_harm_rule(hits: list[str], settings: PtosSettings,
                   head: judge.Verdict | None) -> Scored:
    if head is not None:  # a trained self_harm head: it decides, words only explain
        return head.score, head.reason, head.fired
    second = "a second phrase" if len(set(hits)) > 1 else None
    return words_rule(hits, settings.lexicon_hit_score, second)


def with_heads(ctx: TaskContext, settings: PtosSettings, text: str,
               found: dict[str, judge.Verdict]) -> dict[str, Scored]:
    """The categories from the heads' verdicts (grebe.flows.judge) and the word lists."""
    facts: MediaFacts = ctx.results["media"]
    hits = _hits(text, settings)

    def model(name: str) -> Scored:
        v = found.get(name)
        return (v.score, v.reason, v.fired) if v is not None else (0.0, f"no {name} head", False)

    threat = found.get(judge.THREAT)
    insult, offensive = found.get(judge.INSULT), found.get(judge.OFFENSIVE)
    violence: Scored
    if threat is not None and threat.fired:
        violence = (threat.score, threat.reason, True)
    else:
        second = insult.reason if insult is not None and insult.fired else None
        violence = words_rule(hits["violence"], settings.lexicon_hit_score, second)
    harassment = model(judge.INSULT)
    if not harassment[2] and offensive is not None and offensive.fired:
        harassment = (harassment[0], f"{offensive.reason}; not aimed at a person", False)
    return {
        "spam": model(judge.SPAM), "hate": model(judge.HATE), "harassment": harassment,
        "sexual": sexual_rule(hits["sexual"], facts, settings, found.get("sexual")),
        "violence": violence,
        "self_harm": self_harm_rule(hits["self_harm"], settings, found.get("self_harm")),
    }


def legacy(ctx: TaskContext, settings: PtosSettings, text: str) -> dict[str, Scored]:
    """The categories from the pre-heads models (spam head, profanity, HateSonar)."""
    facts: MediaFacts = ctx.results["media"]
    tox, spam = ctx.results["toxicity"], ctx.results["spam"]
    hits = _hits(text, settings)
    limits = settings.category_thresholds
    # A second person word ("you") aims an insult; an @mention alone does not.
    targeted = bool(hits[TARGETING])
    harassment = tox["offensive"] * (1.0 if targeted else UNTARGETED_HARASSMENT_FACTOR)
    offensive_fired = harassment >= limits.get("harassment", 1.0)
    second = f"offensive {tox['offensive']:.2f}" if offensive_fired else None
    return {
        "spam": (spam, f"spam head {spam:.2f}", spam >= limits.get("spam", 1.0)),
        "hate": (tox["hate"], f"hate model {tox['hate']:.2f}",
                 tox["hate"] >= limits.get("hate", 1.0)),
        "harassment": (harassment, f"offensive {tox['offensive']:.2f}, "
                       + ("aimed at someone" if targeted else "not aimed at anyone"),
                       offensive_fired),
        "sexual": sexual_rule(hits["sexual"], facts, settings, None),
        "violence": words_rule(hits["violence"], settings.lexicon_hit_score, second),
        "self_harm": self_harm_rule(hits["self_harm"], settings, None),
    }
