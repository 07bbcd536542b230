"""Cheap text signals that models miss: links, shouting, repetition, words, sentences,
and (through grebe.flows.author_memory) the same text posted again and again by one
author. The one place these rules live: the flows and the built-in `basic` plan read a
link or a shouting post the same way.

Pure functions, so each is unit-testable without models.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grebe.flows.author_memory import AuthorMemory

_LINK = re.compile(r"(?:https?://|www\.)\S+", re.IGNORECASE)
_WORD = re.compile(r"\w+", re.UNICODE)
_SPACE = re.compile(r"\s+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def count_links(text: str) -> int:
    return len(_LINK.findall(text))


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def shouting(text: str, min_letters: int) -> float:
    """Share of upper-case letters outside links, 0 for texts with too few letters."""
    letters = "".join(filter(str.isalpha, _LINK.sub("", text)))  # C loops, not Python's
    if len(letters) < min_letters:
        return 0.0
    return sum(map(str.isupper, letters)) / len(letters)


def repetition(text: str, min_tokens: int) -> float:
    """1 - distinct/total tokens: 'buy buy buy buy' -> 0.75; short texts -> 0."""
    tokens = words(text)
    if len(tokens) < min_tokens:
        return 0.0
    return 1.0 - len(set(tokens)) / len(tokens)


def normalize(text: str) -> str:
    """What counts as 'the same text': case, spacing and links ignored."""
    return _SPACE.sub(" ", _LINK.sub("", text.lower())).strip()


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """[start, end) of each sentence, surrounding whitespace left out: where a summary
    finds each sentence's tokens in the text's own encoder pass."""
    spans, start = [], 0
    for cut in [*(m.span() for m in _SENTENCE.finditer(text)), (len(text), len(text))]:
        piece = text[start : cut[0]]
        stripped = piece.strip()
        if stripped:
            first = start + piece.index(stripped)
            spans.append((first, first + len(stripped)))
        start = cut[1]
    return spans


def sentences(text: str) -> list[str]:
    return [text[a:b] for a, b in sentence_spans(text)]


@dataclass(frozen=True, slots=True)
class TextSignals:
    links: int
    shouting: float
    repetition: float
    duplicates: int  # earlier copies of this text by the same author within the window


def text_signals(
    text: str, *, author_id: str, post_id: str, memory: AuthorMemory,
    shouting_min_letters: int, repetition_min_tokens: int,
) -> TextSignals:
    return TextSignals(
        links=count_links(text),
        shouting=shouting(text, shouting_min_letters),
        repetition=repetition(text, repetition_min_tokens),
        duplicates=memory.observe(author_id, post_id, text) if text.strip() else 0,
    )
