"""The conversational-ham reader of the head training scripts
(scripts/heads_corpora_chat.py): English lines only, ham for spam alone, one split per
conversation, near-duplicates once, and a changed layout failing loudly; on a small wheel
in the package's own layout (the real wheel stays outside git)."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import heads_corpora as hc
import heads_corpora_chat as hcc

GREETINGS = """categories:
- greetings
conversations:
- - Hello, I am here for my appointment.
  - Who is your appointment with?
  - Dr. Smith will see you now.
- - how much money do you have
  - How much money do you have?
  - 42
"""


def wheel(root: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(root / hcc.CHATTERBOT_WHEEL, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return root


def test_english_lines_are_spam_ham_and_a_conversation_shares_one_split(tmp_path: Path) -> None:
    rows = list(hcc.chatterbot(wheel(tmp_path, {
        "chatterbot_corpus/data/english/greetings.yml": GREETINGS,
        "chatterbot_corpus/data/spanish/greetings.yml": GREETINGS.replace("Hello", "Hola"),
    })))
    assert [r.text for r in rows] == ["Hello, I am here for my appointment.",
                                      "Who is your appointment with?",
                                      "Dr. Smith will see you now.",
                                      "how much money do you have"]
    assert all(r.labels == {"spam": 0} and r.corpus == "chatterbot" for r in rows)
    first = {r.split for r in rows[:3]}
    assert len(first) == 1 and first <= set(hc.SPLITS)


def test_a_file_without_conversations_is_an_error_naming_it(tmp_path: Path) -> None:
    root = wheel(tmp_path, {"chatterbot_corpus/data/english/odd.yml": "categories: [x]\n"})
    with pytest.raises(ValueError, match=r"odd\.yml"):
        list(hcc.chatterbot(root))


def test_the_reader_is_registered_for_the_spam_head() -> None:
    assert "chatterbot" in hc.TRAINING and "chatterbot" in hc.SOURCES
