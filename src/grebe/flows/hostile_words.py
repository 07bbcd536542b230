"""Hostile words said, not denied: the lexical signal that lets the hate head's verdict
stand at a lower bar (grebe.flows.judge).

Why: the hate head reads a sentence embedding, which places a post by its topic, so a
post defending a group ("Women are human beings. They deserve respect") sits near the
hate it answers and can clear the head's bar. Hate says something hostile about its
target: a hostile word ("vermin", "filthy", "exterminate"), a slur or profanity. A post
with such a word that it does not deny ("immigrants are not criminals" denies it) may
be judged at a lower bar; a post without one needs the head's own, higher bar. Implicit
hate with no hostile word ("they should all be locked up in cages") is left to the head.
Both bars are policy data, chosen on the validation split at the head's stated FPR
(docs/quality.md).
"""

from __future__ import annotations

import re
from itertools import islice

from grebe.flows import rude_words

#: words of hostility and violence that are neither profanity nor a group: what hate
#: says about its target ("filthy", "vermin", "criminals") and wishes on it ("die",
#: "exterminate"); insult words ("worthless", "parasites", "freaks") count through
#: rude_words.RUDE (`hostile`), so they are not repeated here
HOSTILE = re.compile(
    r"hate|hated|hates|hating|hatred|hateful|despise\w*|disgust\w*|despicable|vile|filth\w*"
    r"|scum\w*|vermin|savages?|animals|plague|cancer|disease\w*|trash|garbage"
    r"|subhumans?|inferior|evil|dirty|sick|kill\w*|die|dies|death|dead|murder\w*|rape\w*"
    r"|stab\w*|shoot\w*|burn\w*|tortur\w*|suffer\w*|hang\w*|slaughter\w*|exterminat\w*"
    r"|execut(?:e|ed|es|ing|ion|ions)"
    r"|genocide|deport\w*|eradicat\w*|annihilat\w*|contempt|pathetic|disgrace\w*|cockroach\w*"
    r"|rats|pigs|monkeys?|useless|dishonest|ignorant|lazy|dangerous|criminals?"
    r"|thieves|invaders?|infest\w*|primitive|backward|barbari\w*|terrorists?|rapists?"
    r"|degenerat\w*|pervert\w*|abominat\w*|unnatural"
    r"|apes?|worst",
    re.IGNORECASE)
WORD = re.compile(r"(?<![\w@#])[\w'*]+(?![\w*])")
#: a negation that denies what follows it in its clause
NEGATION = re.compile(
    r"\b(?:not|never|no|nobody|none|nothing|cannot|(?:do|does|did|is|are|was|were|wo|ca"
    r"|should|would|must|could)n'?t|opposite\s+of)\b", re.IGNORECASE)
#: where a negation's reach ends: the end of its clause ("... don't belong here and
#: they're sick"), or a clause it governs ("is it not obvious that I hate them", "not
#: surprised the idea was bullshit": the negation is of the matrix verb, not the word)
CLAUSE_END = re.compile(r"[.,;:!?]|\b(?:but|that|how|because|after|when|whether|was|is|are)\b"
                        r"|\band\s+(?:they|they're|he|she|we|i|you|it|these|those)\b",
                        re.IGNORECASE)
#: a condition before the negation asserts what the negation would deny: "I'd be okay
#: with them if they weren't such scumbags" says they are
CONDITION = re.compile(r"\b(?:if|unless|as\s+long\s+as)\b", re.IGNORECASE)
#: the speaker's disclaimer right before a word, "I'm not a bigot, but ...": the word is
#: about the speaker, neither said of the group nor denied of it
DISCLAIMER = re.compile(r"(?<!\w)i\s*(?:'|\u2019)?\s*(?:m|am|was)\s+(?:not|never|no)"
                        r"(?:\s+(?:a|an|some|being))?\s+$", re.IGNORECASE)
#: how far back a negation may stand from the word it denies
NEGATION_REACH = 40
#: a negation that compares or excepts affirms what follows: "no better than rats",
#: "nothing but vermin", "no one else is as filthy", "not worth shit"
AFFIRMING = re.compile(r"(?:\b(?:no|not|nothing|none)|n't)\s+(?:better|more|less|other|else"
                       r"|but|as|worth)\b|\bno\s+one\s+else\b", re.IGNORECASE)
#: hostile words read per text at most: a post with more is not denying them all, and a
#: crafted one of a million words must not hold an engine
MAX_HOSTILE = 64


def hostile(word: str) -> bool:
    """A hostile word, slur or profanity (one word, any case)."""
    return bool(HOSTILE.fullmatch(word) or rude_words.RUDE.fullmatch(word))


def denied(text: str, start: int) -> bool:
    """Whether a negation in the same clause, shortly before `start`, denies the word
    there ("not criminals", "no disabled person deserves to die")."""
    before = text[max(0, start - NEGATION_REACH):start].replace("\u2019", "'")
    clause = AFFIRMING.sub(" ", CLAUSE_END.split(before)[-1])
    negation = NEGATION.search(clause)
    return negation is not None and CONDITION.search(clause, 0, negation.start()) is None


def denies_hostility(text: str) -> bool:
    """Whether the text has hostile words and denies every one of them ("I don't hate
    gay people", "no immigrant deserves to die"): it speaks against hostility."""
    found = _hostile_words(text)
    return 0 < len(found) <= MAX_HOSTILE and all(denied(text, m.start()) for m in found)


def _hostile_words(text: str) -> list[re.Match[str]]:
    """The text's first MAX_HOSTILE + 1 hostile words, less those in the speaker's
    disclaimer."""
    return list(islice((m for m in WORD.finditer(text) if hostile(m.group(0))
                        and not DISCLAIMER.search(text, max(0, m.start() - NEGATION_REACH),
                                                  m.start())),
                       MAX_HOSTILE + 1))


def hostile_word(text: str) -> str | None:
    """The first hostile word the text says and does not deny, lower-cased, or None."""
    found = _hostile_words(text)
    for match in found[:MAX_HOSTILE]:
        if not denied(text, match.start()):
            return match.group(0).lower()
    return found[-1].group(0).lower() if len(found) > MAX_HOSTILE else None
