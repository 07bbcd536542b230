"""grebe.flows.spelling: obfuscated charged words are read as spelt plainly, everything
else is left as written (an ordinary post must not cost a second encoder pass, nor be
judged on words it does not contain)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grebe.flows import spelling


@pytest.mark.parametrize(("written", "plain"), [
    ("G4y people are the absolute worst.", "Gay people are the absolute worst."),
    ("No one else is as f1lthy as them.", "No one else is as filthy as them."),
    ("sh!t happens", "shit happens"),
    ("You are nothing but a slu7.", "You are nothing but a slut."),
    ("Those i m m i g r a n t s again", "Those immigrants again"),
    ("You are nothing but a s l u t.", "You are nothing but a slut."),  # "a" stays a word
    ("Muslms belong in a zoo.", "Muslims belong in a zoo."),  # a letter dropped
    ("I have so much hatrd for them", "I have so much hatred for them"),  # commoner word
    ("I haet immigrants.", "I hate immigrants."),  # two letters swapped
    ("Ihate Muslims", "I hate Muslims"),  # run together
    ("they deserve todie", "they deserve to die"),
    ("I will cut their blackthroats.", "I will cut their black throats."),
])
def test_hidden_charged_words_are_restored(written: str, plain: str) -> None:
    restored = spelling.restore(written)
    assert restored is not None
    assert restored.text == plain
    assert "read as spelt plainly" in restored.reason()


@pytest.mark.parametrize("text", [
    "gonna grab lunch 2day lol b4 the game gr8",  # slang and digits: nothing charged
    "I hate Mondays",  # already plain
    "Thats my boy",  # one *changed* letter from a rude word is a different word
    "Coach Fulk says hi",
    "@user1 #blacklivesmatter https://t.co/ab4s3",  # handles, hashtags, links as written
    "I hate 1st period at 10am",
    "My cat Kyle is the best, love u Nigel",
    "Coburn wants a gun amendment",  # a split needs parts of three letters or a/i/to
    "",
])
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert spelling.restore(text) is None


def test_every_change_is_listed() -> None:
    restored = spelling.restore("G4y people are a c a n c e r")
    assert restored is not None
    assert restored.changes == (("a c a n c e r", "a cancer"), ("G4y", "Gay"))
    assert restored.text == "Gay people are a cancer"


def test_a_crafted_text_is_restored_only_up_to_its_lookup_budget() -> None:
    restored = spelling.restore("Muslms " * 1_000)
    assert restored is not None
    assert len(restored.changes) == spelling.MAX_LOOKUPS  # the rest stay as written
    assert restored.text.count("Muslims") == spelling.MAX_LOOKUPS


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_any_text_is_restored_or_left_alone(text: str) -> None:
    restored = spelling.restore(text)
    if restored is not None:
        assert restored.changes and restored.text != text
        assert all(written in text for written, _ in restored.changes)
