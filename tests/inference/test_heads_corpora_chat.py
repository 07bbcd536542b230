"""The conversational-ham reader of the head training scripts
(scripts/heads_corpora_chat.py): English lines only, ham for spam alone, one split per
conversation, near-duplicates once, and a changed layout failing loudly; on a small wheel
in the package's own layout (the real wheel stays outside git)."""

from __future__ import annotations

import json
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


def test_the_readers_are_registered_for_the_spam_head() -> None:
    for name in ("chatterbot", "chitchat"):
        assert name in hc.TRAINING and name in hc.SOURCES


def chitchat_wheel(root: Path, data: object) -> Path:
    with zipfile.ZipFile(root / hcc.CHITCHAT_WHEEL, "w") as z:
        z.writestr(hcc.CHITCHAT_JSON, json.dumps(data))
    return root


def message(text: str, sender: str) -> dict[str, str]:
    return {"text": text, "timestamp": "2018-05-02T19:38:15Z", "sender": sender}


def conversation(*turns: list[str]) -> dict[str, object]:
    return {"messages": [[message(t, f"s{i % 2}") for t in turn] for i, turn in enumerate(turns)],
            "ratings": {}, "start": "2018-05-02T19:38:15Z", "prompt": ""}


def test_chitchat_rows_are_turns_of_sampled_conversations_ham_for_spam_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hcc, "CHITCHAT_KEEP_PERCENT", 100)
    root = chitchat_wheel(tmp_path, {
        "a": conversation(["Hello", "How are  you doing today?"], ["whats up", "im good"],
                          ["hello!"]),
        "b": conversation(["ill be back in a min"]),
    })
    rows = list(hcc.chitchat(root))
    assert [r.text for r in rows] == ["Hello How are you doing today?", "whats up im good",
                                      "hello!", "ill be back in a min"]
    assert all(r.labels == {"spam": 0} and r.corpus == "chitchat" for r in rows)
    assert len({r.split for r in rows[:3]}) == 1  # a conversation shares one split
    monkeypatch.setattr(hcc, "CHITCHAT_KEEP_PERCENT", 0)
    assert list(hcc.chitchat(root)) == []  # the sample is by conversation


def test_a_chitchat_conversation_without_messages_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hcc, "CHITCHAT_KEEP_PERCENT", 0)  # sampled out, still checked
    root = chitchat_wheel(tmp_path, {"odd-id": {"ratings": {}}})
    with pytest.raises(ValueError, match="odd-id"):
        list(hcc.chitchat(root))
