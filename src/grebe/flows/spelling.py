"""Undo the spellings that hide a charged word from the heads, so the judge reads
"G4y people are the absolute worst" as the heads would read it spelt plainly.

Why: a post that writes a slur, a group or a hostile word as leet ("g4y", "f1lthy"),
spaced letters ("s h i t"), with a letter dropped or swapped ("Muslms", "haet"), or run
into its neighbour ("Ihate", "todie") keeps its meaning for every reader, but the
encoder's word pieces for it are noise and the heads score the post as harmless. This
is the cheapest evasion there is, so it is where a moderation system is probed first.

A word is restored only when it is not an English word (grebe.flows.english_words) and
its restored form is a **charged** word: a rude word or slur (grebe.flows.rude_words),
an identity group (grebe.flows.identity_groups) or a hostile word
(grebe.flows.hostile_words). Ordinary misspellings and slang ("gonna", "lmao", "2day")
are left alone, so an ordinary post is judged on its own words and costs no second
encoder pass. Restoring never labels a post by itself: the restored text goes through
the same heads and rules as any other.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache

from symspellpy import SymSpell, Verbosity

from grebe.flows import english_words, hostile_words, identity_groups
from grebe.flows.english_words import is_english

#: leet digits and symbols inside a word, and what they stand for ("1" may be an l)
LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t",
                      "@": "a", "$": "s", "!": "i"})
LEET_L = str.maketrans({"1": "l"})
#: a word that may hide leet: letters with digits or leet symbols among them
LEETY = re.compile(r"(?<![\w@#$!])(?=[a-zA-Z0-9@$!]{0,30}[a-zA-Z])"
                   r"(?=[a-zA-Z0-9@$!]{0,30}[013457@$!])[a-zA-Z0-9@$!]{1,29}[a-zA-Z0-9](?![\w@$])")
#: non-words looked up per text at most: a crafted post of thousands of distinct
#: non-words must not hold an engine (each lookup is ~50 us); words past it stay as written
MAX_LOOKUPS = 256
#: three or more single letters apart ("s h i t", "i m m i g r a n t s")
SPACED = re.compile(r"(?<![A-Za-z])[A-Za-z](?: [A-Za-z]){2,}(?![A-Za-z])")
#: a plain word of letters (no English word is longer than 30); handles, hashtags and
#: links are left as written
WORD = re.compile(r"(?<![\w@#/.])[A-Za-z]{4,30}(?![\w/])")
LINK = re.compile(r"https?://\S+|www\.\S+")
#: one letter dropped or two neighbours swapped ("Muslms", "hatrd", "haet"); a changed
#: letter is not restored: "thats" is one letter from "twats", "Fulk" from "fuck"
MAX_EDIT = 1
#: the shortest word a letter-edit may restore: shorter ones have too many neighbours
MIN_EDIT_LENGTH = 4


@dataclass(frozen=True, slots=True)
class Restored:
    text: str
    changes: tuple[tuple[str, str], ...]  # (as written, as restored)

    def reason(self) -> str:
        return "read as spelt plainly (" + ", ".join(f"{a!r} -> {b!r}" for a, b in
                                                     self.changes) + ")"


def charged(word: str) -> bool:
    """A rude word, slur, identity group or hostile word (one word, any case)."""
    return bool(hostile_words.hostile(word) or identity_groups.GROUP.fullmatch(word)
                or identity_groups.ADJECTIVE.fullmatch(word))


#: the only words shorter than three letters a split may leave ("Ihate", "todie")
SHORT_PARTS = frozenset({"a", "i", "to"})


@cache
def _charged_speller() -> SymSpell:
    """A speller whose only words are the charged English words (with their counts, so
    of two equally close words the commoner wins: "hatrd" -> "hatred", not "hated")."""
    speller = SymSpell(max_dictionary_edit_distance=MAX_EDIT, prefix_length=7)
    for word, count in english_words.dictionary().items():
        if len(word) >= MIN_EDIT_LENGTH - MAX_EDIT and charged(word):
            speller.create_dictionary_entry(word, count)
    return speller


def _cased(written: str, plain: str) -> str:
    return plain[:1].upper() + plain[1:] if written[:1].isupper() else plain


def _restore_spaced(run: str) -> str | None:
    letters = run.split(" ")
    # "a s l u t", "I h a t e": a leading one-letter word stays a word
    for start in (0, 1) if letters[0].lower() in ("a", "i") else (0,):
        joined = "".join(letters[start:])
        if len(joined) >= 3 and is_english(joined) and charged(joined):
            return " ".join([*letters[:start], joined])
    return None


def _restore_leet(word: str) -> str | None:
    for table in (LEET, LEET_L):
        plain = word.translate(table).translate(LEET)
        if plain != word and plain.isalpha() and is_english(plain) and charged(plain):
            return _cased(word, plain.lower())
    return None


@lru_cache(maxsize=8192)
def _restore_word(word: str) -> str | None:
    """A dropped/added/swapped letter or two words run together, for a non-word.
    Cached: the same non-words (names, slang) recur across posts, and each costs a
    split search and a speller lookup."""
    low = word.lower()
    if is_english(low):
        return None
    for cut in range(1, len(low)):  # two words run together are exact: try them first
        head, tail = low[:cut], low[cut:]
        if all(len(part) >= 3 or part in SHORT_PARTS for part in (head, tail)) \
                and is_english(head) and is_english(tail) and (charged(head) or charged(tail)):
            return f"{word[:cut]} {word[cut:]}"
    found = [item for item in _charged_speller().lookup(low, Verbosity.ALL, MAX_EDIT)
             if _dropped_or_swapped(low, item.term)]
    if not found:
        return None
    return _cased(word, max(found, key=lambda item: item.count).term)


def _dropped_or_swapped(written: str, word: str) -> bool:
    """`written` is `word` with one letter left out, or with two neighbours swapped."""
    if len(written) == len(word) - 1:
        return any(word[:i] + word[i + 1:] == written for i in range(len(word)))
    if len(written) == len(word):
        diff = [i for i in range(len(word)) if word[i] != written[i]]
        return (len(diff) == 2 and diff[1] == diff[0] + 1
                and written[diff[0]] == word[diff[1]] and written[diff[1]] == word[diff[0]])
    return False


def _substitute(restorer: Callable[[str], str | None], changes: list[tuple[str, str]],
                budget: list[int]) -> Callable[[re.Match[str]], str]:
    """A re.sub callback that restores a match with `restorer` and records the change,
    while `budget` (shared by a text's callbacks) lasts."""
    def sub(match: re.Match[str]) -> str:
        if budget[0] <= 0:
            return match.group(0)
        budget[0] -= 1
        plain = restorer(match.group(0))
        if plain is None:
            return match.group(0)
        changes.append((match.group(0), plain))
        return plain
    return sub


@lru_cache(maxsize=4096)
def restore(text: str) -> Restored | None:
    """The text with its hidden charged words spelt plainly, or None when it hides none.
    Cached: the spam, safety and PTOS plans judge the same text several times a post."""
    changes: list[tuple[str, str]] = []
    budget = [MAX_LOOKUPS]
    spaced, leet, word = (_substitute(restorer, changes, budget) for restorer in
                          (_restore_spaced, _restore_leet, _restore_word))
    pieces = []
    last = 0
    for link in [*LINK.finditer(text), None]:  # links are addresses, not words
        end = len(text) if link is None else link.start()
        pieces.append(WORD.sub(word, LEETY.sub(leet, SPACED.sub(spaced, text[last:end]))))
        if link is not None:
            pieces.append(link.group(0))
            last = link.end()
    return Restored("".join(pieces), tuple(changes)) if changes else None
