"""The lexical signals beside the heads: rude words (grebe.flows.rude_words), a named
identity group (grebe.flows.identity_groups) and quoted speech (grebe.flows.judge)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grebe.flows.identity_groups import names_group
from grebe.flows.judge import own_words
from grebe.flows.rude_words import addresses_someone, insulting_word, rude_word, said_of_self


@pytest.mark.parametrize(("text", "word"), [
    ("holy shit this pizza is amazing", "shit"), ("fuuuck yes", "fuuuck"),
    ("damn, what a goal", "damn"), ("you absolute clown", "clown"),
    ("go away you ugly moron", "ugly"),
])
def test_rude_words(text: str, word: str) -> None:
    assert rude_word(text) == word


@pytest.mark.parametrize("text", [
    "Watched Kick Ass today with the GF, great film :-)", "I smell like a campfire. :)",
    "that workout killed me", "@dumbledore_fan see you there", "#shitake recipes",
])
def test_no_rude_word(text: str) -> None:
    assert rude_word(text) is None


def test_insulting_word_is_not_mere_profanity() -> None:
    assert insulting_word("fuck yes, I passed my driving test") is None
    assert insulting_word("he is such a moron") == "moron"


@pytest.mark.parametrize(("text", "own"), [
    ("I'm such a retard sometimes.", True), ("I feel utterly stupid lol", True),
    ("call me a loser but I love it", True), ("I’m such an idiot", True),
    ("The show is the most retarded ever", False), ("I'm not stupid, he is a moron", False),
    ("I am an idiot and you are a moron", False), ("no insult here, I'm fine", False),
])
def test_insult_words_said_of_oneself(text: str, own: bool) -> None:
    assert said_of_self(text) is own


def test_a_crafted_text_of_many_self_insults_is_read_only_so_far() -> None:
    assert said_of_self("I am an idiot. " * 16)
    assert not said_of_self("I am an idiot. " * 10_000)  # past MAX_SELF_WORDS: not read


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_said_of_self_needs_an_insult_word_and_no_you(text: str) -> None:
    if said_of_self(text):
        assert insulting_word(text) is not None and not addresses_someone(text)


def test_addressing_is_words_not_mentions() -> None:
    assert addresses_someone("thank you so much")
    assert addresses_someone("you’re late")
    assert not addresses_someone("@you_know_who great game")


@pytest.mark.parametrize(("text", "group"), [
    ("black people are subhuman", "black people"), ("all immigrants are vermin", "immigrants"),
    ("Muslims should leave", "muslims"), ("gay folks everywhere", "gay folks"),
    ("I will shoot the next gay man I see", "gay man"), ("that Muslim should leave", "that muslim"),
    ("no immigrant deserves a job here", "no immigrant"), ("he is a black person", "black person"),
    ("You are nothing but common Muslim trash.", "muslim trash"),
    ("That is fitting for female vermin like you.", "female vermin"),
    ("Gay lives are worth absolutely nothing.", "gay lives"),
])
def test_names_group(text: str, group: str) -> None:
    assert names_group(text) == group


@pytest.mark.parametrize("text", ["I hate Mondays", "my black cat", "the gym was packed",
                                  "a gay bar opened downtown", "a christian school", "the man",
                                  "take out the trash", "my life is a mess", "party animals"])
def test_names_no_group(text: str) -> None:
    assert names_group(text) is None


def test_own_words_replace_quoted_statements() -> None:
    assert (own_words('He should be in jail for wishing "death to all women".')
            == "He should be in jail for wishing that.")
    assert own_words("no quotes here") is None
    assert own_words('a "short" word') is None  # fewer than three words: not a statement


@pytest.mark.parametrize(("text", "word"), [
    ("What a young little punk!", "punk"), ("you are a liar and a hypocrite", "liar"),
    ("go back to your silo, libtard", "libtard"),
])
def test_common_insults_are_insult_words(text: str, word: str) -> None:
    assert insulting_word(text) == word


@pytest.mark.parametrize("text", ["I love psychology", "a foolproof plan", "thuggery"])
def test_insult_words_are_whole_words(text: str) -> None:
    assert insulting_word(text) is None
