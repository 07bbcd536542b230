"""grebe.flows.hostile_words: a hostile word counts when the post says it, not when a
negation in its clause denies it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grebe.flows import hostile_words


@pytest.mark.parametrize(("text", "word"), [
    ("Immigrants are vermin", "vermin"),
    ("they should all be exterminated", "exterminated"),
    ("we would be better off if they were eradicated", "eradicated"),
    ("Women are all completely worthless", "worthless"),
    ("immigrants are criminals and invaders", "criminals"),
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


@pytest.mark.parametrize(("text", "word"), [
    ("Immigrants are no better than rats", "rats"),  # a comparison affirms
    ("No one else is as filthy as these people", "filthy"),
    ("Their lives aren't worth shit", "shit"),
    ("Is it not obvious that I hate them?", "hate"),  # the negation is the matrix verb's
    ("I am not surprised the idea was bullshit", "bullshit"),
    ("I'd be okay with them if they weren't such scumbags", "scumbags"),  # a condition
    ("Fine with immigrants as long as they aren't filthy", "filthy"),
])
def test_a_negation_that_compares_or_governs_another_clause_denies_nothing(
        text: str, word: str) -> None:
    assert hostile_words.hostile_word(text) == word
    assert not hostile_words.denies_hostility(text)


@pytest.mark.parametrize(("text", "denies"), [
    ("I don't hate gay people", True),
    ("No immigrant deserves to die.", True),
    ("Muslims are not vermin and not scum", True),
    ("Refugees are not criminals, they are not dangerous", True),
    ("Women are the opposite of stupid", True),
    ("No prisoner should ever be executed", True),
    ("Muslims are not vermin, they are scum", False),  # one denied, one said
    ("Women deserve respect", False),  # no hostile word: nothing to deny
])
def test_denies_hostility_only_when_every_hostile_word_is_denied(text: str,
                                                                 denies: bool) -> None:
    assert hostile_words.denies_hostility(text) is denies


def test_a_crafted_text_of_many_denials_is_read_only_so_far() -> None:
    many = "not vermin " * 10_000
    assert not hostile_words.denies_hostility(many)  # past MAX_HOSTILE it is no denial
    assert hostile_words.hostile_word(many) == "vermin"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_any_text_gives_a_word_it_holds_or_none(text: str) -> None:
    word = hostile_words.hostile_word(text)
    assert word is None or word in text.lower()
    if hostile_words.denies_hostility(text):
        assert word is None
