"""Readers for the conversational ham of the spam head (issue 11): the English
dialogues of the ChatterBot corpus (PyPI `chatterbot-corpus` 1.3.3, BSD-3; heads `-7`),
1,870 distinct lines of small talk, questions, tech support and money talk; and since
heads `-8` the BYU Chit-Chat Challenge chats (PyPI `chitchat-dataset` 0.9.0, MIT),
people texting each other in a chat box, sampled by conversation.

Used by `scripts/heads_corpora.py` (which registers it) and so by `train_heads.py`.
Why: until `-7` the spam head's ham was tweets, YouTube comments and e-mail, and it
read short personal messages as promotion: "Hello" 0.81, "How can I use your
product?" 0.96, "Hello, I am here for my appointment." and "how much money do you
have" over the remove bar; 172 of these 1,870 lines (9.2%) were labelled spam. A
short-message spam corpus's ham is exactly this kind of text. Every line is ham for
the spam head and says nothing to the other heads (the corpus has insults aimed at
the bot, "you are a waste", so it cannot be the offensive head's negatives).

Lines of one conversation share a split (they answer each other); the split is the
usual salted hash of the file and the conversation's index.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import yaml
from heads_corpora import Row, bucket, unique

CHATTERBOT_WHEEL = "chatterbot_corpus-1.3.3-py2.py3-none-any.whl"
CHATTERBOT_ENGLISH = "chatterbot_corpus/data/english/"


def chatterbot(root: Path) -> Iterator[Row]:
    """Every distinct English line of the corpus's conversations, ham for `spam`. A file
    without a `conversations` list is an error naming it (a changed layout must stop
    the run, not shrink the corpus)."""
    return unique(_chatterbot_rows(root))


def _chatterbot_rows(root: Path) -> Iterator[Row]:
    with zipfile.ZipFile(root / CHATTERBOT_WHEEL) as wheel:
        names = sorted(n for n in wheel.namelist()
                       if n.startswith(CHATTERBOT_ENGLISH) and n.endswith(".yml"))
        for name in names:
            doc = yaml.safe_load(wheel.read(name).decode("utf-8"))
            conversations = doc.get("conversations") if isinstance(doc, dict) else None
            if not isinstance(conversations, list):
                raise ValueError(f"{CHATTERBOT_WHEEL}:{name}: no conversations list")
            topic = name.rsplit("/", 1)[1].removesuffix(".yml")
            for i, conversation in enumerate(conversations):
                for line in conversation:
                    if not isinstance(line, str):
                        continue
                    yield Row(" ".join(line.split()), "chatterbot", {"spam": 0}, topic,
                              group=f"chatterbot/{topic}/{i}")


CHITCHAT_WHEEL = "chitchat_dataset-0.9.0-py3-none-any.whl"
CHITCHAT_JSON = "chitchat_dataset/dataset.json"
# 7,168 conversations, 138,737 turns: 15% of the conversations (~20,000 turns) was
# better on validation than 5% or 25% (docs/quality.md), and embeds in a minute.
CHITCHAT_KEEP_PERCENT = 15


def chitchat(root: Path) -> Iterator[Row]:
    """One row per turn (a sender's consecutive messages joined, as one would send them
    in one text) of a hash-sampled share of the conversations, ham for `spam` only. Why:
    ChatterBot is scripted bot talk; these are people texting ("ill be back in a min",
    "haha yes, are you?"), what a short-message corpus's ham reads like. A conversation
    without a `messages` list, sampled or not, is an error naming it."""
    return unique(_chitchat_rows(root))


def _chitchat_rows(root: Path) -> Iterator[Row]:
    with zipfile.ZipFile(root / CHITCHAT_WHEEL) as wheel:
        data = json.loads(wheel.read(CHITCHAT_JSON).decode("utf-8"))
    for conv_id in sorted(data):
        turns = data[conv_id].get("messages") if isinstance(data[conv_id], dict) else None
        if not isinstance(turns, list):
            raise ValueError(f"{CHITCHAT_WHEEL}:{CHITCHAT_JSON}: conversation {conv_id}"
                             " has no messages list")
        if bucket(f"sample:chitchat/{conv_id}") >= CHITCHAT_KEEP_PERCENT:
            continue
        for turn in turns:
            text = " ".join(" ".join(str(m.get("text", "")).split()) for m in turn).strip()
            yield Row(text, "chitchat", {"spam": 0}, "turn", group=f"chitchat/{conv_id}")


READERS = {"chatterbot": chatterbot, "chitchat": chitchat}

SOURCES = {
    "chatterbot": {
        "title": "ChatterBot corpus, English dialogues (small talk, questions, support)",
        "where": "PyPI chatterbot-corpus 1.3.3 wheel, chatterbot_corpus/data/english/*.yml",
        "licence": "BSD-3-Clause",
        "files": [CHATTERBOT_WHEEL],
    },
    "chitchat": {
        "title": "BYU Chit-Chat Challenge dataset, people chatting (turns, 15% of conversations)",
        "where": "PyPI chitchat-dataset 0.9.0 wheel, chitchat_dataset/dataset.json",
        "licence": "MIT",
        "files": [CHITCHAT_WHEEL],
    },
}
