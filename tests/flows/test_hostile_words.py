"""grebe.flows.hostile_words: a hostile word counts when the post says it, not when a
negation in its clause denies it."""

from __future__ import annotations

import pytest

from grebe.flows import hostile_words


@pytest.mark.parametrize(("text", "word"), [
    ("Immigrants are vermin", "vermin"),
    ("they should all be exterminated", "exterminated"),
    ("Muslims are not human, they are filth", "filth"),  # the denial ends at the comma
    ("I don't just dislike them, I despise them", "despise"),
    ("women are fucking useless", "fucking"),  # profanity counts
    ("Trans people don\u2019t belong here and they're sick", "sick"),
])
def test_a_hostile_word_said(text: str, word: str) -> None:
    assert hostile_words.hostile_word(text) == word


@pytest.mark.parametrize("text", [
    "Immigrants are not criminals or vermin",
    "No disabled person deserves to die.",
    "Let me be clear: I don't hate gay people.",
    "Women are human beings. They deserve respect.",  # nothing hostile at all
    "Muslims should never be treated like trash",
    "",
])
def test_no_hostile_word_or_only_denied_ones(text: str) -> None:
    assert hostile_words.hostile_word(text) is None


def test_reach_of_a_negation_is_bounded() -> None:
    far = "I do not think that anyone here would ever disagree that they are vermin"
    assert hostile_words.hostile_word(far) == "vermin"
