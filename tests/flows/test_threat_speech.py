"""The threat grammar (grebe.flows.threat_speech) and the verdict built on it: plain
threats are shaped, hyperbole and everyday violent words are not."""

from __future__ import annotations

import pytest

from grebe.flows.ptos_depth import subtype_of
from grebe.flows.services import MediaFacts
from grebe.flows.settings import PtosSettings
from grebe.flows.threat_speech import (
    SHAPED_FLOOR,
    everyday_sense,
    game_context,
    hyperbole,
    judge_threat,
    threat_shape,
)


@pytest.mark.parametrize("text", [
    "I will find where you live",
    "I’ll kill you",  # typographic apostrophe
    "we're gonna beat you up after school",
    "Ill personally firebomb her house tonight",
    "you're dead, watch yourself",
    "watch your back",
    "I know where your kids go to school",
    "they should all be hanged",
    "Hang the traitor!",
    "someone needs to put a bullet in him",
    "death to all traitors",
    "I'll make sure you never walk again",
    "you won't live to see tomorrow",
    "I'm coming for you",
    "you're next.",
    "I hope someone shoots him",
    "keep it up and you'll end up in a ditch",
    "we will hunt you down",
    "your family will pay",
    "I'm going to shoot up the school tomorrow",
    "they should hang for treason",
    "firing squad for every one of them",
    "get the rope",
    "someone should shoot that senator",  # a person named by role
    "I will stab the judge",
    "they must be arrested and executed",  # ThreatGram's train split
    "traitors should be mass executed",
    "I wish I could hang every one of them",
    "I want to kill all of you",
])
def test_threats_are_shaped(text: str) -> None:
    assert threat_shape(text) is not None


@pytest.mark.parametrize("text", [
    "I will find you a seat",
    "we're going to shoot some hoops",
    "I'm going to kill it at the gym tomorrow",
    "I will not shoot you, relax",
    "I know where you are coming from",
    "sleep when you are dead",
    "you will pay less with this plan",
    "they are scared to death to try",
    "people don't have to be shot to care about guns",
    "hang the laundry outside",
    "shoot him a message",
    "you're next in line at the bakery",
    "I'll make sure you don't work too hard",
    "we are coming for the title",
    "I'll track the package",
    "hang out with friends tonight",
    "hang in there, buddy",
    "I hung up on him",
    "we should shoot this scene again",  # a role, not a thing, makes the target
    "someone should kill the lights",
    "I want to kill this workout",
    "I wish I could see them again",
])
def test_look_alikes_are_not_shaped(text: str) -> None:
    assert threat_shape(text) is None


@pytest.mark.parametrize(("text", "idiom"), [
    ("that workout killed me", "killed me"),
    ("you absolutely killed it", "killed it"),
    ("this crossword will be the death of me", "the death of me"),
    ("I'm dying of laughter", "I'm dying"),
    ("some days I just want to die", "I just want to die"),
])
def test_hyperbole(text: str, idiom: str) -> None:
    assert hyperbole(text) == idiom


def test_verdict_needs_two_signals() -> None:
    shaped = "I will hurt you if you come here again"
    assert judge_threat(shaped, SHAPED_FLOOR, 0.73)[0]
    assert not judge_threat(shaped, SHAPED_FLOOR - 0.01, 0.73)[0]  # no violent words
    # the head alone at its threshold still fires, unless it is hyperbole
    assert judge_threat("Hangings coming for them", 0.9, 0.73)[0]
    fired, why = judge_threat("that workout killed me", 0.86, 0.73)
    assert not fired and "hyperbole" in why
    assert not judge_threat("we're going to shoot some hoops", 0.6, 0.73)[0]


@pytest.mark.parametrize("text", [
    "I know where you live",
    "watch your back, I know where your kids go to school",
    "your days are numbered",
    "you won't make it home tonight",
    "your family will pay",
])
def test_a_menace_that_names_where_or_what_is_a_threat_whatever_the_head_reads(text: str
                                                                              ) -> None:
    """The ThreatGram-trained head reads violent words; these menaces have none (it
    scores "I know where you live" 0.14), so their shape alone is the threat."""
    fired, why = judge_threat(text, 0.01, 0.49)
    assert fired and "exposure" in why


def test_an_ambiguous_menace_still_needs_the_head() -> None:
    assert not judge_threat("you'll regret it, this sale ends tonight", 0.05, 0.49)[0]
    assert judge_threat("you'll regret it", SHAPED_FLOOR, 0.49)[0]


@pytest.mark.parametrize(("text", "sense"), [
    ("i have a shoot saturday, wish me luck with the lighting", "a shoot"),
    ("we're going to shoot some hoops after school", "shoot some hoops"),
    ("shooting a video for the channel tonight", "shooting a video"),
    ("just killing time at the airport", "killing time"),
    ("trying to beat the heat today", "beat the heat"),
])
def test_everyday_senses_of_violent_verbs_are_not_threats(text: str, sense: str) -> None:
    assert everyday_sense(text) == sense
    fired, why = judge_threat(text, 0.9, 0.49)  # the head reads "shoot" as violence
    assert not fired and "everyday sense" in why


@pytest.mark.parametrize("text", [
    "I will shoot you", "shoot them all", "someone should shoot that senator",
    "kill the traitors", "we will beat you to death",
])
def test_violence_done_to_someone_has_no_everyday_sense(text: str) -> None:
    assert everyday_sense(text) is None


@pytest.mark.parametrize("text", [
    "Police say 12 people were shot dead outside the stadium last night",
    "Hikers found dead near the lake, investigation under way",
    "Another mass shooting and Congress does nothing",
])
def test_news_of_violence_is_not_a_threat_from_the_head_alone(text: str) -> None:
    fired, why = judge_threat(text, 0.8, 0.49)
    assert not fired and "news of violence" in why


def test_a_threat_shaped_text_with_a_count_is_still_a_threat() -> None:
    fired, _ = judge_threat("I will shoot all 20 of you dead", 0.8, 0.49)
    assert fired


@pytest.mark.parametrize(("text", "subtype"), [
    ("I will find where you live and make you pay", "threat"),
    ("they should all be hanged", "threat"),
    ("the film has a lot of violence", None),
])
def test_a_threat_shaped_post_is_violence_of_subtype_threat(text: str, subtype: str | None
                                                            ) -> None:
    assert subtype_of("violence", text, MediaFacts(), PtosSettings()) == subtype


@pytest.mark.parametrize(("text", "game"), [
    ("I will beat you at chess tomorrow", "at chess"),
    ("we will destroy them in the final", "in the final"),
    ("I'll end you at Mario Kart", "at Mario Kart"),
    ("gonna murder you guys on Saturday in the derby", "on Saturday in the derby"),
])
def test_named_game_talk_is_not_a_threat(text: str, game: str) -> None:
    assert game_context(text) == game
    fired, why = judge_threat(text, 0.95, 0.49)  # the head reads the verbs as violence
    assert not fired and "game talk" in why


def test_game_words_do_not_hide_a_threat_without_a_game() -> None:
    assert game_context("shoot him in the field") is None
    assert game_context("blow up presidents (in Minecraft)") is None  # a joke covering one
    assert judge_threat("I know where you live, see you at the game", 0.05, 0.49)[0]


#: One text per way CALL or MENACE can match, each holding as few of NEEDS' words as it
#: can: dropping a needed word from NEEDS hides one of them.
SCREENED_SHAPES = [
    *(f"they should all be {done}" for done in (
        "killed", "shot", "hanged", "hung", "executed", "lynched", "murdered", "burned",
        "burnt alive", "gassed", "exterminated", "wiped out", "eradicated", "slaughtered",
        "beheaded", "put down", "beaten", "stabbed", "tortured", "strung up")),
    *(f"just {act} them" for act in (
        "kill", "hang", "shoot", "gas", "exterminate", "lynch", "execute", "behead",
        "slaughter", "murder", "burn", "stab")),
    "put a bullet in", "snap his neck", "slit her throat", "death to tyrants",
    "they should all die", "I hope someone hurts him", "I hope you get raped",
    "you're dead", "you're going to bleed", "you'll pay for this", "you will regret it",
    "you'll be sorry", "you're next", "watch your back",
]


def _texts_with_violent_words() -> list[str]:
    """Every text of the flows' test data and the bench tweets, and SCREENED_SHAPES in
    three cases, with a non-ASCII letter, and with the shape behind 500 characters."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    texts = [json.loads(line)["text"] for line in
             (root / "bench" / "data" / "tweets.jsonl").read_text().splitlines()]
    for path in sorted((root / "tests" / "flows" / "data").glob("*.jsonl")):
        texts += [json.loads(line).get("text", "") for line in path.read_text().splitlines()
                  if line.strip()]
    for shaped in SCREENED_SHAPES:
        texts += [shaped, shaped.upper(), shaped.title(), f"ſo {shaped}",
                  shaped.replace("s", "ſ").replace("i", "\u0131").replace("k", "\u212a"),
                  f"{'an ordinary day. ' * 30}{shaped}"]
    return texts


def test_the_substring_screen_never_hides_a_shape() -> None:
    """threat_shape with its substring screen (NEEDS) finds what the patterns alone find,
    on real posts and on texts made of the screened words."""
    import re

    from grebe.flows.threat_speech import PATTERNS, _plain

    def unscreened(text: str) -> str | None:
        text = _plain(text)
        for name, pattern in PATTERNS.items():
            found = pattern.search(text)
            if found is not None:
                return f"{name}: {found.group(0).strip()!r}"
        return None

    assert all(unscreened(text) is not None for text in SCREENED_SHAPES)
    texts = _texts_with_violent_words()
    assert len(texts) > 4000
    differ = [t for t in texts if threat_shape(t) != unscreened(t)]
    assert differ == []
    assert sum(unscreened(t) is not None for t in texts) > 50  # the screen was exercised
    assert re.search("ſ", "".join(texts))  # a letter IGNORECASE reads as "s"


def test_the_screen_knows_every_letter_ignorecase_reads_as_ascii() -> None:
    """Every code point outside ASCII that IGNORECASE matches to an ASCII letter is in
    ASCII_FOLD, mapped to that letter (the screen reads text through it)."""
    import re
    import string
    import sys

    from grebe.flows.threat_speech import ASCII_FOLD

    letter = re.compile("[a-z]", re.IGNORECASE)
    found = {}
    for code in range(128, sys.maxunicode + 1):
        if letter.fullmatch(chr(code)):
            found[code] = "".join(c for c in string.ascii_lowercase
                                  if re.fullmatch(c, chr(code), re.IGNORECASE))
    assert found == ASCII_FOLD
