"""English words: symspellpy's 82,765-word frequency dictionary (MIT, shipped in its
wheel; from Google Books n-grams and SCOWL) plus the rude words and newer words it lacks.

Two readers: grebe.flows.spelling (a word that is not English may be a hidden charged
word) and grebe.flows.language (a post whose words are almost all English is English,
whatever a short-text language detector guessed: "I hate how Christmas music starts in
October" read as Nigerian Pidgin 0.54 made every English head abstain).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

#: rude words and slurs the frequency dictionary lacks (grebe.flows.rude_words)
EXTRA_WORDS = {"asshole": 1, "badass": 1, "beaner": 1, "dipshit": 1, "dumbass": 1,
               "halfwit": 1, "paki": 1, "pakis": 1, "raghead": 1, "smartass": 1, "spics": 1,
               "towelhead": 1, "trannies": 1, "tranny": 1, "wetback": 1, "wetbacks": 1,
               # words newer than the dictionary, which a split would otherwise cut up
               "transphobia": 1, "transphobic": 1, "islamophobic": 1, "lgbt": 1,
               "lgbtq": 1}
#: a word of letters in any script (digits and handles are no evidence of a language)
WORD = re.compile(r"(?<![@#\w])[^\W\d_]{2,}(?!\w)")
MARKUP = re.compile(r"https?://\S+|www\.\S+|[@#]\w+|&\w+;|\bURL\b|\bUSER\b|\bRT\b")


@cache
def dictionary() -> dict[str, int]:
    """English words (lower case) and their counts."""
    path = resources.files("symspellpy") / "frequency_dictionary_en_82_765.txt"
    with path.open(encoding="utf-8") as fh:
        words = {word: int(count) for word, count in (line.split() for line in fh)}
    return words | EXTRA_WORDS


def is_english(word: str) -> bool:
    return word.lower() in dictionary()


def english_share(text: str) -> tuple[int, int]:
    """(English words, words) of a text, links, handles and hashtags left out."""
    words = WORD.findall(MARKUP.sub(" ", text))
    return sum(is_english(w) for w in words), len(words)
