"""Target-aware text verdicts from the trained heads (grebe.inference.heads), shared by
the spam, safety and PTOS flows so they can never disagree about what a text is.

Why target-aware: profanity in joy ("that's fucking awesome!") is not harassment, and
"I hate Mondays" is not hate. So:

- `offensive`: the offensive head at its threshold. Profanity aimed at no one: a label,
  never on its own a reason to remove or limit.
- `insult`: offensive **and** the target head says the post is aimed at an individual.
  An @mention is not a target (the head reads the words, not the markup).
- `hate`: the hate head at its threshold **and** the target head reading the post as
  aimed at a group or other collective rather than at an individual (P(group) +
  P(other) >= P(individual)); never a word rule. "I hate Mondays" reads as a feeling of
  the speaker (target individual 0.42 vs group+other 0.41) and is not hate.
  Counter-speech is not hate either (`counter_speech`): a post that denounces hate
  ("hating gay people is wrong", "statements like \"...\" are hurtful"), or that negates
  a statement more hateful than itself ("immigrants are not the problem": the head
  scores "immigrants are the problem" higher), keeps its hate score but does not fire.
  The embedding puts such posts beside the hate they answer (same group, same topic),
  which is why this is a rule on top of the head and not left to it.
- `threat`: the threat head at its threshold.
- `spam`: the spam head at its threshold.

Thresholds are policy data: `head_thresholds["<head>.<class>"]` of the plan when set,
else the head's own threshold, chosen on its validation split at its stated FPR. A head
abstains (`unsupported_language`) on a post in a language it was not trained and
evaluated on; an abstaining head never fires.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from grebe.core.task import TaskContext
from grebe.errors import ConfigError
from grebe.flows import language, shared

SPAM, OFFENSIVE, INSULT, HATE, THREAT = "spam", "offensive", "insult", "hate", "threat"
TARGET_HEAD, INDIVIDUAL, GROUP, OTHER = "target", "individual", "group", "other"
#: verdict -> (head, its positive class)
POSITIVE: dict[str, tuple[str, str]] = {
    SPAM: ("spam", "spam"), OFFENSIVE: ("offensive", "offensive"),
    HATE: ("hate", "hate"), THREAT: ("threat", "threat"),
}


#: A judgement of hate or of hateful speech: "hating X is wrong", "that's racist",
#: "stop calling X ...", "shame on", "how dare you". Its subject is an act of speech or
#: a pronoun, never a group ("gay people are disgusting" must not read as denunciation),
#: so the predicates are words that judge speech, not people.
_JUDGED = (r"(?:so\s+|just\s+|really\s+|completely\s+|plain\s+)?(?:wrong|hurtful|hateful"
           r"|unacceptable|not\s+ok(?:ay)?|never\s+ok(?:ay)?|bigoted|bigotry|racist|sexist"
           r"|homophobic|transphobic|xenophobic|shameful|ignorant|hate\s+speech)")
DENOUNCING = re.compile(
    rf"\b(?:it'?s|it\s+is|that'?s|that\s+is|this\s+is)\s+{_JUDGED}\b"
    rf"|\b(?:hating|attacking|insulting|calling|saying|blaming|mocking|treating|hurting"
    rf"|harassing|excluding|dehumani[sz]ing|discriminating)\b[^.!?]{{0,60}}?"
    rf"\b(?:is|are|was)\s+{_JUDGED}\b"
    rf"|\b(?:statements?|comments?|words|posts?|tweets?|remarks?|jokes?|slurs?|language)\b"
    rf"[^\n]{{0,120}}?\b(?:is|are|was|were)\s+{_JUDGED}\b"
    rf"|\b(?:stop|quit)\s+(?:calling|saying|telling|treating|spreading|blaming)\b"
    rf"|\bshame\s+on\b|\bhow\s+(?:can|could|dare)\s+(?:you|anyone|people)\b"
    rf"|\b(?:i|we)\s+(?:condemn|reject|denounce|oppose)\b",
    re.IGNORECASE)
#: A quoted or reported statement ("statements like '...'", "people who say ..."): the
#: hateful words belong to someone else, and the post may be judging them.
QUOTING = re.compile(r"[\"\u201c\u201d]|\b(?:statements?|comments?|posts?|tweets?|words|"
                     r"people|those)\s+(?:like|who\s+say|saying)\b", re.IGNORECASE)
#: Negations whose removal gives the statement a post denies.
NEGATION = re.compile(r"\b(?:can|won)'?t\b|n't\b|\b(?:not|never)\s+|\bno\s+longer\s+",
                      re.IGNORECASE)
#: How much higher the hate head must score the post without its negation before the
#: post counts as denying hate: scores of near-paraphrases wobble by a few hundredths,
#: and "X are disgusting and should not exist" (0.85) vs "... should exist" (0.86) is
#: such a wobble, not a denial.
NEGATION_MARGIN = 0.1
#: what a negation becomes ("don't hate" -> "do hate"); anything else is dropped
DENIED_NEGATION = {"can't": "can", "cant": "can", "won't": "will", "wont": "will", "n't": ""}


def denied_statement(text: str) -> str | None:
    """The post with its negations removed ("X are not the problem" -> "X are the
    problem"), or None when it has none."""
    if not NEGATION.search(text):
        return None
    return NEGATION.sub(lambda m: DENIED_NEGATION.get(m.group(0).lower(), ""), text)


async def counter_speech(ctx: TaskContext, text: str, hate_score: float) -> str | None:
    """Why a post the hate head flags is counter-speech, or None when it is not."""
    found = DENOUNCING.search(text)
    if found is not None:
        quoted = " (quoting)" if QUOTING.search(text) else ""
        return f"counter-speech: denounces hate ({found.group(0)!r}){quoted}"
    denied = denied_statement(text)
    if denied is None:
        return None
    denied_score = (await shared.head_probs(ctx, denied))["hate"]["hate"]
    if denied_score >= hate_score + NEGATION_MARGIN:
        return (f"counter-speech: negates a statement the hate head scores higher "
                f"({denied_score:.2f} >= {hate_score:.2f} + {NEGATION_MARGIN} without the "
                f"negation)")
    return None


@dataclass(frozen=True, slots=True)
class Verdict:
    score: float
    threshold: float
    fired: bool
    reason: str  # which head, which score, which rule
    abstained: bool = False


def languages_of(ctx: TaskContext, head: str) -> tuple[str, ...]:
    """The languages a text verdict may be given in: the head's own when heads are
    loaded, else those of the pre-heads models."""
    heads = ctx.services.models.heads
    if heads is not None and head in heads.heads:
        return tuple(heads.heads[head].languages)
    return language.LEGACY_TEXT_LANGUAGES


def threshold(ctx: TaskContext, head: str, cls: str) -> tuple[float, str]:
    """The policy's threshold for head.class, else the head's validation threshold."""
    key = f"{head}.{cls}"
    policy = shared.settings_of(ctx).head_thresholds
    if key in policy:
        return float(policy[key]), "policy"
    info = ctx.services.models.heads.heads[head]
    if cls not in info.thresholds:
        raise ConfigError(f"head {head} ({ctx.services.models.heads.version}) has no validation "
                          f"threshold for {cls!r}: set head_thresholds[{key!r}] in the policy")
    return float(info.thresholds[cls]), f"validation threshold at FPR {info.target_fpr:g}"


def _rule(name: str, score: float, limit: float, source: str) -> str:
    return f"head {name} {score:.2f} {'>=' if score >= limit else '<'} {limit:.2f} ({source})"


async def verdicts(ctx: TaskContext, text: str, *, gate: bool = True) -> dict[str, Verdict]:
    """Every verdict the loaded heads support for `text` ({} when there are no heads or
    no text). `gate=False` for text the media pipeline produced with English-only OCR
    and ASR: its language is English by construction, whatever the post's."""
    heads = ctx.services.models.heads
    if heads is None or not text.strip():
        return {}
    probs = await shared.head_probs(ctx, text)
    out: dict[str, Verdict] = {}
    for name, (head, cls) in POSITIVE.items():
        if head not in heads.heads:
            continue
        why_not = (await language.abstain_reason(ctx, f"head {head}", heads.heads[head].languages)
                   if gate else None)
        if why_not:
            out[name] = Verdict(0.0, 1.0, False, why_not, abstained=True)
            continue
        score = probs[head][cls]
        limit, source = threshold(ctx, head, cls)
        out[name] = Verdict(score, limit, score >= limit, _rule(head, score, limit, source))
    known = {h for h, _ in POSITIVE.values()} | {TARGET_HEAD}
    for head, info in heads.heads.items():  # heads added later (self_harm, sexual...)
        if head in known or len(info.classes) != 2:
            continue
        why_not = (await language.abstain_reason(ctx, f"head {head}", info.languages)
                   if gate else None)
        if why_not:
            out[head] = Verdict(0.0, 1.0, False, why_not, abstained=True)
            continue
        cls = info.classes[1]
        score = probs[head][cls]
        limit, source = threshold(ctx, head, cls)
        out[head] = Verdict(score, limit, score >= limit, _rule(head, score, limit, source))
    hate = out.get(HATE)
    if hate is not None and hate.fired:
        why = await counter_speech(ctx, text, hate.score)
        if why is not None:
            out[HATE] = hate = replace(hate, fired=False, reason=f"{hate.reason}; {why}")
    if hate is not None and hate.fired and TARGET_HEAD in heads.heads:
        target = probs[TARGET_HEAD]
        collective = target.get(GROUP, 0.0) + target.get(OTHER, 0.0)
        leaning = (f"target group+other {collective:.2f} "
                 f"{'>=' if collective >= target[INDIVIDUAL] else '<'} "
                 f"individual {target[INDIVIDUAL]:.2f}")
        out[HATE] = Verdict(hate.score, hate.threshold, collective >= target[INDIVIDUAL],
                            f"{hate.reason}; {leaning}")
    offensive = out.get(OFFENSIVE)
    if offensive is not None and TARGET_HEAD in heads.heads:
        if offensive.abstained:
            out[INSULT] = offensive
        else:
            # An insult has two signals (offensive words, aimed at a person), so the
            # policy may let its offensive part use a lower bar (`insult.offensive`)
            # than the `offensive` label, which has only one.
            rude, rude_limit, rude_reason = offensive.fired, offensive.threshold, offensive.reason
            if f"{INSULT}.{OFFENSIVE}" in shared.settings_of(ctx).head_thresholds:
                rude_limit, source = threshold(ctx, INSULT, OFFENSIVE)
                rude = offensive.score >= rude_limit
                rude_reason = _rule(f"{OFFENSIVE} (for {INSULT})", offensive.score, rude_limit,
                                    source)
            aimed = probs[TARGET_HEAD][INDIVIDUAL]
            limit, source = threshold(ctx, TARGET_HEAD, INDIVIDUAL)
            fired = rude and aimed >= limit
            reason = (f"{rude_reason}; target "
                      f"{_rule(f'{TARGET_HEAD}={INDIVIDUAL}', aimed, limit, source)}")
            out[INSULT] = Verdict(min(offensive.score, aimed) if rude else 0.0,
                                  limit, fired, reason)
    return out
