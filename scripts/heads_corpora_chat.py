"""Reader for the conversational ham added in heads `-7` (issue 11): the English
dialogues of the ChatterBot corpus (PyPI `chatterbot-corpus` 1.3.3, BSD-3), 1,870
distinct lines of small talk, questions, tech support and money talk.

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

import zipfile
from collections.abc import Iterator
from pathlib import Path

import yaml
from heads_corpora import Row

CHATTERBOT_WHEEL = "chatterbot_corpus-1.3.3-py2.py3-none-any.whl"
CHATTERBOT_ENGLISH = "chatterbot_corpus/data/english/"


def chatterbot(root: Path) -> Iterator[Row]:
    """Every distinct English line of the corpus's conversations, ham for `spam`. A file
    without a `conversations` list is an error naming it (a changed layout must stop
    the run, not shrink the corpus)."""
    seen: set[str] = set()
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
                    row = Row(" ".join(line.split()), "chatterbot", {"spam": 0}, topic,
                              group=f"chatterbot/{topic}/{i}")
                    if row.key and row.key not in seen:
                        seen.add(row.key)
                        yield row


READERS = {"chatterbot": chatterbot}

SOURCES = {
    "chatterbot": {
        "title": "ChatterBot corpus, English dialogues (small talk, questions, support)",
        "where": "PyPI chatterbot-corpus 1.3.3 wheel, chatterbot_corpus/data/english/*.yml",
        "licence": "BSD-3-Clause",
        "files": [CHATTERBOT_WHEEL],
    },
}
