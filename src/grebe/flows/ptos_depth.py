"""The PTOS categories that have no labelled data in grebe (child safety, violent
extremism, civic integrity, illegal or regulated goods), their subtypes, and the
cross-checks that send a disagreement to review.

Why conservative rules: with no labelled data there is no head to trust and no FPR to
quote, so each category needs **two independent word-list signals** (what and why:
a minor *and* a sexual term; a regulated good *and* an offer to sell it; a voting
process *and* a false claim about it; an extremist group *and* support or violence).
One word list alone reports its hits in the reason and never matches. The LLM path
scores every category itself and is the upgrade (docs/annotations.md, safety_ptos).

Child safety is never decided by one reader: a second, independent check (a second
prompt on the LLM path; locally the media/heads signals rather than the words) must
agree. When the two disagree the post is labelled `needs_review` with the reason,
never silently "no violation".
"""

from __future__ import annotations

from dataclasses import dataclass

from grebe.flows import judge
from grebe.flows.ptos_rules import Scored, lexicon_hits, lexicon_score
from grebe.flows.services import MediaFacts
from grebe.flows.settings import PtosSettings
from grebe.flows.threat_speech import threat_shape

CHILD_SAFETY = "child_safety"
EXTREMISM = "violent_extremism"
CIVIC = "civic_integrity"
ILLEGAL = "illegal_goods"
SEXUAL = "sexual"
VIOLENCE = "violence"
THREAT = "threat"  # the violence subtype of a threat-shaped post
#: The categories this module scores, each from two word lists: (first, second).
TWO_SIGNAL_LISTS: dict[str, tuple[str, str]] = {
    CHILD_SAFETY: ("minor", "sexual"),
    EXTREMISM: ("extremist", "extremist_support"),
    CIVIC: ("civic_process", "civic_claim"),
    ILLEGAL: ("regulated_goods", "sale_offer"),
}
DEPTH_CATEGORIES = tuple(TWO_SIGNAL_LISTS)
LABEL_NEEDS_REVIEW = "needs_review"
REVIEW_PREFIX = "review."  # reasons key: review.<category>


@dataclass(frozen=True, slots=True)
class CrossCheck:
    """The second reader's verdict on a category and why."""

    violation: bool
    reason: str


def two_signal_rule(text: str, lists: tuple[str, str], settings: PtosSettings) -> Scored:
    """Matched only when both word lists hit; one list alone is reported, not matched."""
    first = sorted(set(lexicon_hits(text, settings.lexicons.get(lists[0], []))))
    second = sorted(set(lexicon_hits(text, settings.lexicons.get(lists[1], []))))
    if not first and not second:
        return 0.0, "no matching terms", False
    score = lexicon_score(first + second, settings.lexicon_hit_score)
    named = f"{lists[0]} {first or 'none'}, {lists[1]} {second or 'none'}"
    if first and second:
        return score, f"matched {named}", True
    # Half the score: a single list is evidence, not a violation (two signals needed).
    return score / 2, f"{named}; needs both lists", False


def depth_categories(text: str, settings: PtosSettings) -> dict[str, Scored]:
    """Step 1 for the categories without labelled data (every one: two signals)."""
    return {c: two_signal_rule(text, lists, settings) for c, lists in TWO_SIGNAL_LISTS.items()}


def subtype_of(category: str, text: str, facts: MediaFacts, settings: PtosSettings) -> str | None:
    """The first subtype of `category` (policy order) whose phrases occur in the text;
    violence in the shape of a threat (grebe.flows.threat_speech) is `threat`; sexual
    content from the images alone is `explicit_media`."""
    if (category == VIOLENCE and THREAT in settings.subtypes.get(VIOLENCE, {})
            and threat_shape(text) is not None):
        return THREAT
    for subtype, phrases in settings.subtypes.get(category, {}).items():
        if lexicon_hits(text, phrases):
            return subtype
    if category == SEXUAL and facts.max_nsfw >= settings.category_thresholds.get(SEXUAL, 1.0):
        return settings.media_subtype
    return None


def local_child_safety_check(text: str, facts: MediaFacts, settings: PtosSettings,
                             found: dict[str, judge.Verdict]) -> CrossCheck:
    """The second, independent local reader: a minor term with sexual *media* (NSFW
    score) or a trained `sexual` head, rather than the sexual word list the first
    reader used. Agreement needs both readers; one alone goes to review."""
    minor = sorted(set(lexicon_hits(text, settings.lexicons.get("minor", []))))
    if not minor:
        return CrossCheck(False, "no minor term")
    limit = settings.category_thresholds.get(SEXUAL, 1.0)
    head = found.get(SEXUAL)
    if facts.max_nsfw >= limit / 2:
        return CrossCheck(True, f"minor {minor} with nsfw {facts.max_nsfw:.2f} in the media")
    if head is not None and head.fired:
        return CrossCheck(True, f"minor {minor} with {head.reason}")
    return CrossCheck(False, f"minor {minor} but nsfw {facts.max_nsfw:.2f} and no sexual head")


def disagreement(category: str, first: Scored, second: CrossCheck) -> str | None:
    """Why the two readers disagree on `category`, or None when they agree."""
    _, first_reason, first_hit = first
    if first_hit == second.violation:
        return None
    return (f"{category}: first check {'matched' if first_hit else 'did not match'} "
            f"({first_reason}); second check {'found' if second.violation else 'found no'} "
            f"violation ({second.reason})")


def sexual_cross_validation(text: str, facts: MediaFacts, settings: PtosSettings) -> str | None:
    """Text signal vs NSFW image score: a post whose text reads sexual while its checked
    images score clean is a disagreement to review (a caption can mislabel, and so can
    the image model). Explicit images under a neutral caption need no review: the
    images decide."""
    if not facts.items or facts.unchecked:
        return None  # no checked images: nothing to cross-validate against
    hits = sorted(set(lexicon_hits(text, settings.lexicons.get(SEXUAL, []))))
    limit = settings.category_thresholds.get(SEXUAL, 1.0)
    if hits and facts.max_nsfw < limit / 2:
        return (f"{SEXUAL}: the text reads sexual ({hits}) but the images score "
                f"nsfw {facts.max_nsfw:.2f} < {limit / 2:.2f}")
    return None
