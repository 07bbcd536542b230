"""Readers for the identity-hate corpora added in heads `-4` (issue 11): CONAN and
Multitarget-CONAN (hate speech paired with counter-narratives), Stormfront sentences
and ToxiGen's human-written statements.

Used by `scripts/heads_corpora.py` (which registers them) and so by `train_heads.py`.
Why these: the `hate` head learnt from Davidson's slur-based tweets and 998 ETHOS
comments, so it missed hate without slurs and flagged counter-speech (the same group
words, the same topic). Here the positives are identity hate written without slurs, and
the negatives are exactly the look-alikes: counter-narratives that name the group and
quote the hate to refute it (CONAN), neutral or supportive statements about the same
13 groups (ToxiGen), and ordinary sentences from the same forum as the hate
(Stormfront).

Rows that belong together are split together: a `Row.group` (the hate speech a
counter-narrative answers, the forum post a sentence comes from) replaces the text key
in the salted split, so a paraphrase or a reply never sits in test while its original
trains. Every text is de-duplicated by its near-duplicate key, first seen kept.
"""

from __future__ import annotations

import csv
import io
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from heads_corpora import Row, bucket, split_of, text_key, unique

CONAN_FILE = "conan_CONAN.csv"
MULTITARGET_FILE = "conan_Multitarget-CONAN.csv"
STORMFRONT_TAR = "stormfront-hate-speech-dataset.tar"
TOXIGEN_TAR = "toxigen-prompts.tar"
# Stormfront "noHate" is 9,507 forum sentences (mostly small talk): 40% of them in
# train/val is plenty of negatives and saves embedding time; test keeps every row.
STORMFRONT_NOHATE_KEEP_PERCENT = 40
_CONAN_HS_ID = re.compile(r"^(.*?HS\d+)")
_TOXIGEN_ITEM = re.compile(r"(?:\\n|\n)\s*-\s*")


def _hate_labels(hateful: bool) -> dict[str, int]:
    """A hateful text says nothing about threats (some are, most are not); a non-hateful
    one is no threat either, so it is a threat negative too."""
    return {"hate": 1} if hateful else {"hate": 0, "threat": 0}


def conan(root: Path) -> Iterator[Row]:
    """CONAN (English part, Islamophobia; hate speech with paraphrases P1, P2…) and
    Multitarget-CONAN (5,003 pairs, eight target groups). Hate speech is hate; a
    counter-narrative is not hate and no threat. Research use only: no
    redistribution, so only the trained weights are committed (docs/quality.md)."""
    return unique(_conan_rows(root))


def _conan_rows(root: Path) -> Iterator[Row]:
    groups: dict[str, str] = {}  # CONAN hate-speech id -> split group
    with (root / CONAN_FILE).open(encoding="utf-8", newline="") as fh:
        for rec in csv.DictReader(fh):
            if not rec["cn_id"].startswith("EN"):
                continue  # French and Italian: every head is English only
            match = _CONAN_HS_ID.match(rec["cn_id"])
            hs_id = match.group(1) if match else rec["cn_id"]
            group = groups.setdefault(hs_id, text_key(rec["hateSpeech"]))
            yield Row(rec["hateSpeech"], "conan", _hate_labels(True), "hs:MUSLIMS", group)
            yield Row(rec["counterSpeech"], "conan", _hate_labels(False), "cn:MUSLIMS", group)
    with (root / MULTITARGET_FILE).open(encoding="utf-8", newline="") as fh:
        for rec in csv.DictReader(fh):
            group = text_key(rec["HATE_SPEECH"])
            target = rec["TARGET"]
            yield Row(rec["HATE_SPEECH"], "conan", _hate_labels(True), f"hs:{target}", group)
            yield Row(
                rec["COUNTER_NARRATIVE"], "conan", _hate_labels(False), f"cn:{target}", group
            )


def _member(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    """A file of the archive, or an error that names the archive and the file."""
    try:
        member = tar.extractfile(name)
    except KeyError:
        member = None
    if member is None:
        raise FileNotFoundError(f"{tar.name!s}: no file {name} (is this the right archive?)")
    return member


def stormfront(root: Path) -> Iterator[Row]:
    """de Gibert et al. 2018 (CC-BY-SA-3.0): Stormfront forum sentences labelled hate /
    noHate (`relation`, needing the neighbouring sentences, and `idk/skip` are left
    out). Sentences of one post share a split."""
    with tarfile.open(root / STORMFRONT_TAR) as tar:
        meta = _member(tar, "annotations_metadata.csv")
        labels = {
            rec["file_id"]: rec["label"]
            for rec in csv.DictReader(io.TextIOWrapper(meta, encoding="utf-8"))
        }
        rows = []
        for file_id, label in sorted(labels.items()):
            if label not in ("hate", "noHate"):
                continue
            member = _member(tar, f"all_files/{file_id}.txt")
            text = " ".join(member.read().decode("utf-8", errors="replace").split())
            group = f"stormfront:{file_id.split('_')[0]}"
            if (
                label == "noHate"
                and split_of(group) != "test"
                and bucket(f"sample:{group}:{file_id}") >= STORMFRONT_NOHATE_KEEP_PERCENT
            ):
                continue
            rows.append(Row(text, "stormfront", _hate_labels(label == "hate"), label, group))
    return unique(rows)


def toxigen_sentences(raw: str) -> list[str]:
    """One ToxiGen prompt line holds several '- sentence' items joined by a literal
    backslash-n; a demonstrations line is one sentence."""
    items = _TOXIGEN_ITEM.split("\n" + raw)
    return [s.strip() for s in items if s.strip() and s.strip() != "-"]


def toxigen(root: Path) -> Iterator[Row]:
    """ToxiGen (Hartvigsen et al. 2022; data CDLA-Permissive-2.0, code MIT): the
    human-written implicit hate and neutral statements about 13 groups that seed its
    generator (`prompts/{hate,neutral}_<group>_1k.txt`, `demonstrations/**`). The
    machine-generated sentences are not used."""
    rows = []
    with tarfile.open(root / TOXIGEN_TAR) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            name = Path(member.name)
            if not member.isfile() or name.suffix != ".txt":
                continue
            kind = name.stem.split("_")[0]
            if kind not in ("hate", "neutral"):
                continue
            group_name = re.sub(r"^(hate|neutral)_|_(1k|sentences)$", "", name.stem)
            for line in _member(tar, member.name).read().decode("utf-8").splitlines():
                for sentence in toxigen_sentences(line):
                    subset = f"{kind}:{group_name}"
                    rows.append(Row(sentence, "toxigen", _hate_labels(kind == "hate"), subset))
    return unique(rows)


READERS = {"conan": conan, "stormfront": stormfront, "toxigen": toxigen}

SOURCES = {
    "conan": {
        "title": "CONAN (Chung et al. 2019, English part) + Multitarget-CONAN (Fanton et"
        " al. 2021): hate speech / counter-narrative pairs",
        "where": "github marcoguerini/CONAN@627faf12 CONAN/CONAN.csv,"
        " Multitarget-CONAN/Multitarget-CONAN.csv",
        "licence": "research use only, no redistribution (README); cite the papers",
        "files": [CONAN_FILE, MULTITARGET_FILE],
    },
    "stormfront": {
        "title": "Hate speech dataset from a white supremacist forum (de Gibert et al. 2018)",
        "where": "github Vicomtech/hate-speech-dataset@b802137e (git archive of all_files/,"
        " annotations_metadata.csv, LICENSE, README.md)",
        "licence": "CC-BY-SA-3.0 (Spain)",
        "files": [STORMFRONT_TAR],
    },
    "toxigen": {
        "title": "ToxiGen human-written prompts (Hartvigsen et al. 2022)",
        "where": "github microsoft/TOXIGEN@01517e81 (git archive of prompts/,"
        " demonstrations/, LICENSE.txt)",
        "licence": "CDLA-Permissive-2.0 (data), MIT (code)",
        "files": [TOXIGEN_TAR],
    },
}
