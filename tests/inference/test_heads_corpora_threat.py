"""The threat corpus reader of the head training scripts (scripts/heads_corpora_threat.py):
which ThreatGram level is a threat, de-duplication, and a changed schema failing loudly,
on a small file in the corpus' own format (the real file stays outside git)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import heads_corpora as hc
import heads_corpora_threat as hct


def write(root: Path, records: list[dict[str, object]]) -> Path:
    (root / hct.THREATGRAM_FILE).write_text(json.dumps(records), encoding="utf-8")
    return root


def test_only_violent_level_is_a_threat_and_legal_punishment_is_a_negative(
        tmp_path: Path) -> None:
    rows = list(hct.threatgram(write(tmp_path, [
        {"reply": "Hang them all, traitors", "Label": 2, "telegramChannel": "a.json"},
        {"reply": "Lock her up!", "Label": 1, "telegramChannel": "a.json"},
        {"reply": "Have a great day Suzy!", "Label": 0, "telegramChannel": "b.json"},
    ])))
    assert [(r.text, r.labels, r.subset) for r in rows] == [
        ("Hang them all, traitors", {"threat": 1}, "violent"),
        ("Lock her up!", {"threat": 0}, "legal"),
        ("Have a great day Suzy!", {"threat": 0}, "none"),
    ]
    assert all(r.corpus == "threatgram" and r.split in hc.SPLITS for r in rows)


def test_near_duplicates_are_read_once_first_kept(tmp_path: Path) -> None:
    rows = list(hct.threatgram(write(tmp_path, [
        {"reply": "Execute  them\nall!", "Label": 2},
        {"reply": "execute them all", "Label": 0},
        {"reply": "😂", "Label": 0},  # no words: no key, nothing to learn from
    ])))
    assert [(r.text, r.labels["threat"]) for r in rows] == [("Execute them all!", 1)]


@pytest.mark.parametrize("record", [{"reply": "x", "Label": 3}, {"Label": 2},
                                    {"reply": None, "Label": 0}])
def test_a_record_outside_the_schema_is_an_error_naming_it(
        tmp_path: Path, record: dict[str, object]) -> None:
    write(tmp_path, [{"reply": "fine", "Label": 0}, record])
    with pytest.raises(ValueError, match="record 1"):
        list(hct.threatgram(tmp_path))


def test_registered_with_its_source_and_licence() -> None:
    assert hc.TRAINING["threatgram"] is hct.threatgram
    assert hc.SOURCES["threatgram"]["licence"] == "CC-BY-4.0"
    assert hc.SOURCES["threatgram"]["files"] == [hct.THREATGRAM_FILE]
