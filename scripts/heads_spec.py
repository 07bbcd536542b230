"""What each text head learns from: classes, training corpora, stated false-positive
rate, and the cross-corpus checks (`scripts/train_heads.py` reads these).

Kept apart from the trainer so the choice of data reads in one place: a head's sources
are the corpora whose rows carry a label for it (scripts/heads_corpora.py and
scripts/heads_corpora_hate.py decide which rows are positives, which negatives, and
which say nothing).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HeadSpec:
    classes: tuple[str, ...]
    sources: tuple[str, ...]
    target_fpr: float  # on the validation negatives; 0 = argmax, no thresholds
    why: str


HEADS = {
    "spam": HeadSpec(
        ("ham", "spam"),
        ("youtube", "spamassassin", "davidson", "olid", "insults", "ethos"),
        0.01,
        "spam/promotion in short text; ordinary tweets, insults and hateful comments are its"
        " ham, so neither warmth nor hostility reads as spam",
    ),
    "offensive": HeadSpec(
        ("none", "offensive"),
        ("davidson", "olid", "insults"),
        0.02,
        "profanity/offensive language of any kind (Davidson hate+offensive, OLID OFF, insults)",
    ),
    "target": HeadSpec(
        ("untargeted", "individual", "group", "other"),
        ("olid", "insults"),
        0.0,
        "who an offensive post is aimed at (OLID levels B/C; Kaggle insults are individual)",
    ),
    "hate": HeadSpec(
        ("none", "hate"),
        ("davidson", "ethos", "olid", "stormfront", "toxigen"),
        0.01,
        "hate at an identity group (Davidson hate, ETHOS isHate, Stormfront hate, ToxiGen"
        " hate); profanity without a group (Davidson offensive), ordinary tweets, neutral"
        " statements about the groups (ToxiGen) and Stormfront noHate as negatives;"
        " CONAN (hate speech and counter-narratives) is read only to test it",
    ),
    # The new corpora carry no threat labels. Their non-hateful rows as extra threat
    # negatives were tried (heads -4 dry run): the 1% threshold then sat on those easy
    # negatives and ordinary tweets flagged as threats rose (Davidson neither 0.17% ->
    # 0.86%, HateCheck profanity_nh 0.03 -> 0.15), so the threat head keeps its data.
    "threat": HeadSpec(
        ("none", "threat"),
        ("ethos", "davidson", "olid"),
        0.01,
        "threat/incitement of violence (ETHOS violence); ordinary tweets as negatives",
    ),
}


# Fit on the first corpora, test on the last: a gain that shows on one corpus only is
# no gain. The identity-hate rows check that hate learnt from one kind of writing
# (forum sentences, counter-speech pairs, implicit statements) finds the others.
CROSS_CORPUS: list[tuple[str, tuple[str, ...], str]] = [
    ("spam", ("youtube", "davidson"), "spamassassin"),
    ("spam", ("spamassassin", "davidson"), "youtube"),
    ("offensive", ("davidson",), "olid"),
    ("offensive", ("olid",), "davidson"),
    ("offensive", ("davidson", "olid"), "insults"),
    ("hate", ("davidson", "olid"), "ethos"),
    ("hate", ("ethos", "olid"), "davidson"),
    ("hate", ("toxigen", "davidson", "olid"), "stormfront"),
    ("hate", ("stormfront", "toxigen", "davidson", "olid"), "conan"),
    ("hate", ("stormfront", "davidson", "olid"), "toxigen"),
]

# Corpora read to test the heads, never to fit them (nor the n-gram IDF): CONAN's licence
# allows research use only, and weights fitted on it would carry it into every install.
EVALUATION_ONLY = ("conan",)
