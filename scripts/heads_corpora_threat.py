"""Reader for the threat corpus added in heads `-6` (issue 11): ThreatGram 101,
15,076 English Telegram replies labelled by threat level.

Used by `scripts/heads_corpora.py` (which registers it) and so by `train_heads.py`.
Why: until `-6` the `threat` head learnt from 90 ETHOS comments, the only threat labels
found, so it missed plain threats ("I will find where you live") and fired on
hyperbole ("that workout killed me"). ThreatGram's levels are 0 (no threat), 1 (a call
for legal punishment: "lock her up", "impeach", "arrest him") and 2 (a threat or call
of violence or death: "hang them all", "he must be executed"). Only level 2 is a threat
in grebe's sense (violence); level 1 is a look-alike that names punishment without
violence, so it is a negative, which is exactly what the head needs to learn.

Every text is de-duplicated by its near-duplicate key (the file repeats 433 replies),
first seen kept; the split is the usual salted hash of that key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from heads_corpora import Row, unique

THREATGRAM_FILE = "threatgram_Labeled_15076.json"
THREATGRAM_VIOLENT = 2  # the level that is a threat of violence
THREATGRAM_LEVELS = {0: "none", 1: "legal", 2: "violent"}


def threatgram(root: Path) -> Iterator[Row]:
    """ThreatGram 101 labelled replies: threat = level 2; levels 0 and 1 are negatives.
    A record without a known level or text is an error naming it (the file is data we
    ship figures for, so a changed schema must stop the run, not shrink the corpus)."""
    return unique(_threatgram_rows(root))


def _threatgram_rows(root: Path) -> Iterator[Row]:
    records = json.loads((root / THREATGRAM_FILE).read_text(encoding="utf-8"))
    for i, rec in enumerate(records):
        level, text = rec.get("Label"), rec.get("reply")
        if level not in THREATGRAM_LEVELS or not isinstance(text, str):
            raise ValueError(f"{THREATGRAM_FILE} record {i}: want a reply and a Label in "
                             f"{sorted(THREATGRAM_LEVELS)}, got {rec!r}")
        yield Row(" ".join(text.split()), "threatgram",
                  {"threat": int(level == THREATGRAM_VIOLENT)}, THREATGRAM_LEVELS[level])


READERS = {"threatgram": threatgram}

SOURCES = {
    "threatgram": {
        "title": "ThreatGram 101: extreme Telegram replies with threat levels",
        "where": "github CatGamer7/Telegram-threats@52746d55 Labeled_15076.json (copy of"
        " huggingface singlelabelmulticlass/ThreatGram101)",
        "licence": "CC-BY-4.0",
        "files": [THREATGRAM_FILE],
    },
}
