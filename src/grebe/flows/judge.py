"""Target-aware text verdicts from the trained heads (grebe.inference.heads), shared by
the spam, safety and PTOS flows so they can never disagree about what a text is.

Why target-aware: profanity in joy ("that's fucking awesome!") is not harassment, and
"I hate Mondays" is not hate. So:

- `offensive`: the offensive head at its threshold **and** a rude word (profanity, a slur
  or an insult word: grebe.flows.rude_words). The head alone reads "that workout killed
  me" as offensive; a post without offensive language is not. Profanity aimed at no one:
  a label, never on its own a reason to remove or limit.
- `insult`: offensive **and** aimed at a person: the target head says so and the post
  has an insult word or slur or speaks to someone ("you") (the offensive head at the
  policy's `insult.offensive` bar), or the post says an insult word to someone ("you
  absolute clown") at the offensive label's own bar, whatever the target head reads. An
  @mention is not a target (the head reads the words, not the markup).
- `hate`: the hate head at its threshold (or at the policy's lower bar `hate.hostile`
  when the post names an identity group and says a hostile word it does not deny:
  grebe.flows.hostile_words; a post defending a group has none, "vermin" or
  "exterminate" is one) **and** the post about a group: the target head reading it as
  aimed at a group or other collective rather than at an individual (P(group) + P(other)
  >= P(individual)), or the post naming an identity group (grebe.flows.identity_groups:
  the target head, trained on OLID's insults, reads short group hate as personal); never
  a word rule alone. "I hate Mondays" reads as a feeling of the speaker (target
  individual 0.42 vs group+other 0.41) and is not hate. Counter-speech is not hate
  either (`counter_speech`): a post that denounces hate ("hating gay people is wrong",
  "statements like \"...\" are hurtful"), that denies every hostile word it says ("I
  don't hate gay people", "no immigrant deserves to die": grebe.flows.hostile_words), or
  that negates a statement more hateful than itself ("immigrants are not the problem":
  the head scores "immigrants are the problem" higher) while saying no hostile word it
  does not deny ("they won't change, let's eradicate them" denies nothing), keeps its
  hate score but does not fire. Hate inside quotes whose removal leaves words the head
  scores well below the post (`He should be in jail for wishing "death to all women"`)
  is reported speech. The embedding puts such posts beside the hate they answer (same
  group, same topic), which is why this is a rule on top of the head and not left to it.
- `threat`: two signals (grebe.flows.threat_speech): a threat-shaped text (the
  speaker's intent to harm someone, a menace, a call for violence) with the threat head
  at a floor, or the head at its threshold unless its violent words are the speaker's
  hyperbole ("that workout killed me").
- `spam`: the spam head at its threshold, unless the text is a threat (the
  e-mail-trained spam head reads "make you pay" as money; a threat is not promotion).

Thresholds are policy data: `head_thresholds["<head>.<class>"]` of the plan when set,
else the head's own threshold, chosen on its validation split at its stated FPR (the
threat head's floor for a threat-shaped text is `head_thresholds["threat.shaped"]`). A head
abstains (`unsupported_language`) on a post in a language it was not trained and
evaluated on; an abstaining head never fires.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from grebe.core.task import TaskContext
from grebe.errors import ConfigError
from grebe.flows import (
    hostile_words,
    identity_groups,
    language,
    rude_words,
    shared,
    spelling,
    threat_speech,
)

SPAM, OFFENSIVE, INSULT, HATE, THREAT = "spam", "offensive", "insult", "hate", "threat"
#: the policy key suffix of hate's lower bar for posts that say a hostile word
HOSTILE = "hostile"
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
#: what judges an act of speech, and only that: "calling X cockroaches is a horrible
#: thing to do" (said of people, "disgusting" is hate, so it is not in _JUDGED)
_JUDGED_ACT = (rf"(?:{_JUDGED}|(?:so\s+|really\s+|such\s+an?\s+|an?\s+)?(?:horrible|terrible"
               r"|awful|disgusting|appalling|cruel|vile|despicable|disgraceful|inhumane"
               r"|dehumani[sz]ing|small-?minded|unforgivable))")
_ACTS = (r"hating|attacking|insulting|calling|saying|blaming|mocking|treating|hurting"
         r"|harassing|excluding|dehumani[sz]ing|discriminating|threatening|writing|posting"
         r"|tweeting|wishing|comparing")
DENOUNCING = re.compile(
    rf"\b(?:it'?s|it\s+is|that'?s|that\s+is|this\s+is)\s+{_JUDGED}\b"
    rf"|\b(?:{_ACTS})\b[^.!?]{{0,60}}?\b(?:is|are|was)\s+{_JUDGED_ACT}\b"
    rf"|\b(?:statements?|comments?|words|posts?|tweets?|remarks?|jokes?|slurs?|language)\b"
    rf"[^\n]{{0,120}}?\b(?:is|are|was|were)\s+{_JUDGED_ACT}\b"
    rf"|\b(?:stop|quit)\s+(?:calling|saying|telling|treating|spreading|blaming)\b"
    rf"|\bshame\s+on\b|\bhow\s+(?:can|could|dare)\s+(?:you|anyone|people)\b"
    rf"|\b(?:i|we)\s+(?:condemn|reject|denounce|oppose)\b"
    # someone's hate judged: "your contempt for X has to stop", "how hateful you are"
    rf"|\b(?:your|their|his|her)\s+(?:\w+\s+)?(?:contempt|hatred|hate|bigotry|racism"
    rf"|sexism|homophobia|transphobia|xenophobia|prejudice)\b[^.!?]{{0,60}}?"
    rf"\b(?:has\s+to|have\s+to|must|needs?\s+to)\s+stop\b"
    rf"|\bhow\s+(?:hateful|racist|sexist|bigoted|homophobic|transphobic|xenophobic|cruel)"
    rf"\s+(?:you|he|she|they|this|that|it)\b"
    # the speaker disowns the words, or the words have a price
    rf"|\b(?:i|we)\s+(?:never|didn'?t|did\s+not|would\s+never)\s+(?:say|said|call|called"
    rf"|claim|claimed)\b"
    rf"|\bconsequences\s+for\s+(?:{_ACTS})\b"
    rf"|\b(?:{_ACTS})\b[^.!?]{{0,60}}?\bwill\s+get\s+(?:you|them|him|her)\s+(?:thrown"
    rf"|banned|arrested|jailed|fired|locked|suspended)\b"
    # grief at hearing it: "it hurts to see people saying ..."
    rf"|\b(?:hurts|sad|saddening|disheartening|heartbreaking|depressing|upsetting"
    rf"|sickening)\s+to\s+(?:see|hear|read)\b",
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


#: A quoted statement of at least three words: reported speech, not the poster's own.
QUOTED = re.compile(r"[\"\u201c]([^\"\u201c\u201d]*\w+\W+\w+\W+\w+[^\"\u201c\u201d]*)[\"\u201d]")


def own_words(text: str) -> str | None:
    """The post with each quoted statement replaced by "that" (`He should be in jail for
    wishing "death to all women"` -> `... wishing that`), or None when nothing is quoted."""
    if not QUOTED.search(text):
        return None
    return QUOTED.sub("that", text)


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
    if hostile_words.denies_hostility(text):
        return "counter-speech: denies every hostile word it says"
    own = own_words(text)
    if own is not None:
        own_score = (await shared.head_probs(ctx, own))["hate"]["hate"]
        if own_score + NEGATION_MARGIN <= hate_score:
            return (f"counter-speech: the hate is quoted (the post's own words score "
                    f"{own_score:.2f} <= {hate_score:.2f} - {NEGATION_MARGIN})")
    # a post that says a hostile word it does not deny is not denying hate, whatever it
    # negates besides ("they won't change, let's eradicate them")
    denied = denied_statement(text) if hostile_words.hostile_word(text) is None else None
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
    restored = spelling.restore(text)
    if restored is not None:  # judged as spelt plainly; an ordinary post never is
        text = restored.text
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
    threat = out.get(THREAT)
    if threat is not None and not threat.abstained:
        floor = shared.settings_of(ctx).head_thresholds.get(
            f"{THREAT}.shaped", threat_speech.SHAPED_FLOOR)
        fired, shaped = threat_speech.judge_threat(text, threat.score, threat.threshold, floor)
        reason = f"{threat.reason}; {shaped}" if shaped else threat.reason
        out[THREAT] = replace(threat, fired=fired, reason=reason)
        spam = out.get(SPAM)
        if fired and spam is not None and spam.fired:
            out[SPAM] = replace(spam, fired=False,
                                reason=f"{spam.reason}; a threat, not promotion")
    hate = out.get(HATE)
    if hate is not None and not hate.abstained and not hate.fired:
        out[HATE] = hate = _hate_with_hostile_word(ctx, text, hate)
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
        group = identity_groups.names_group(text)
        if group is not None:
            leaning += f"; names a group ({group!r})"
        out[HATE] = Verdict(hate.score, hate.threshold,
                            collective >= target[INDIVIDUAL] or group is not None,
                            f"{hate.reason}; {leaning}")
    offensive = out.get(OFFENSIVE)
    rude = rude_words.rude_word(text)
    if offensive is not None and not offensive.abstained:
        # said only where the word decides: a reason is stored with every annotation
        words = (f"; rude word {rude!r}" if offensive.fired and rude
                 else "; no rude word" if offensive.fired else "")
        out[OFFENSIVE] = replace(offensive, fired=offensive.fired and rude is not None,
                                 reason=f"{offensive.reason}{words}")
    if offensive is not None and TARGET_HEAD in heads.heads:
        out[INSULT] = _insult(ctx, text, offensive, probs[TARGET_HEAD])
    if restored is not None:
        out = {name: replace(v, reason=f"{v.reason}; {restored.reason()}") if v.fired else v
               for name, v in out.items()}
    return out


def _hate_with_hostile_word(ctx: TaskContext, text: str, hate: Verdict) -> Verdict:
    """The hate head at the policy's lower bar `hate.hostile` when the post names an
    identity group and says a hostile word it does not deny (grebe.flows.hostile_words:
    "landfill sites are disgusting" names no group, "I despise construction workers" no
    identity group); unchanged otherwise."""
    bar = shared.settings_of(ctx).head_thresholds.get(f"{HATE}.{HOSTILE}")
    if bar is None or hate.score < float(bar):
        return hate
    group = identity_groups.names_group(text)
    word = hostile_words.hostile_word(text) if group is not None else None
    if word is None:
        return hate
    return Verdict(hate.score, float(bar), True,
                   f"{_rule(HATE, hate.score, float(bar), 'policy')} with hostile word "
                   f"{word!r} about {group!r}")


def _insult(ctx: TaskContext, text: str, offensive: Verdict, target: dict[str, float]
            ) -> Verdict:
    """Offensive, aimed at a person (target head), and with an insult word or spoken to
    someone."""
    if offensive.abstained:
        return offensive
    # An insult has more signals than `offensive` (aimed at a person), so the policy may
    # let its offensive part use a lower bar (`insult.offensive`) than the label's.
    harsh, harsh_limit, harsh_reason = (offensive.score >= offensive.threshold,
                                        offensive.threshold, offensive.reason)
    if f"{INSULT}.{OFFENSIVE}" in shared.settings_of(ctx).head_thresholds:
        harsh_limit, source = threshold(ctx, INSULT, OFFENSIVE)
        harsh = offensive.score >= harsh_limit
        harsh_reason = _rule(f"{OFFENSIVE} (for {INSULT})", offensive.score, harsh_limit, source)
    aimed = target[INDIVIDUAL]
    limit, source = threshold(ctx, TARGET_HEAD, INDIVIDUAL)
    insulting = rude_words.insulting_word(text)
    spoken_to = rude_words.addresses_someone(text)
    # An insult word said to someone ("@x you absolute clown") is an insult when the post
    # is offensive (the label's own bar: the insult word is its rude word), whatever the
    # target head reads (it learnt from OLID and misses short ones).
    # Its score stays min(offensive, aimed) like any insult's: the target head's doubt
    # keeps PTOS's harassment ladder off its remove step.
    aimed_rule = _rule(f"{TARGET_HEAD}={INDIVIDUAL}", aimed, limit, source)
    if insulting is not None and spoken_to and offensive.score >= offensive.threshold:
        return Verdict(min(offensive.score, aimed), offensive.threshold, True,
                       f"{offensive.reason}; target {aimed_rule}; insult word {insulting!r} "
                       f"said to someone")
    pointed = ("" if not (harsh and aimed >= limit)  # said only where it decides
               else f"; insult word {insulting!r}" if insulting
               else "; speaks to someone" if spoken_to else "; no insult word, speaks to no one")
    fired = harsh and aimed >= limit and (insulting is not None or spoken_to)
    reason = f"{harsh_reason}; target {aimed_rule}{pointed}"
    if fired and rude_words.said_of_self(text):  # "I'm such an idiot": insults no one
        fired, reason = False, f"{reason}; said of oneself"
    return Verdict(min(offensive.score, aimed) if harsh else 0.0, limit, fired, reason)
