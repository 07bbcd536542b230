"""The identity-hate corpus readers of the head training scripts (scripts/
heads_corpora_hate.py): labels, what is left out, split groups and de-duplication, on
small files written in each corpus' own format (the real files stay outside git)."""

from __future__ import annotations

import csv
import io
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import heads_corpora as hc
import heads_corpora_hate as hch


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)


def write_tar(path: Path, files: dict[str, str]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def conan_root(tmp_path: Path) -> Path:
    write_csv(
        tmp_path / hch.CONAN_FILE,
        ["cn_id", "hateSpeech", "counterSpeech", "hsType"],
        [
            ["ENT1ST0001HS0033CN000021", "Muslims are invading our towns.",
             "Muslims have lived here for generations and are our neighbours.", "Islamophobia"],
            ["ENT1ST0001HS0033CN000021P1", "Our towns are being invaded by Muslims!",
             "Muslims have lived here for generations and are our neighbours.", "Islamophobia"],
            ["FRT1ST0001HS0001CN000001", "Les musulmans envahissent nos villes.",
             "Ils vivent ici depuis des générations.", "Islamophobia"],
        ],
    )
    write_csv(
        tmp_path / hch.MULTITARGET_FILE,
        ["INDEX", "HATE_SPEECH", "COUNTER_NARRATIVE", "TARGET", "VERSION"],
        [
            ["0", "Women belong in the kitchen.", "Women belong wherever they choose to be.",
             "WOMEN", "V1"],
            ["1", "Women belong in the kitchen!!", "Saying 'women belong in the kitchen' is"
             " sexist, and it is wrong.", "WOMEN", "V1"],
        ],
    )
    return tmp_path


def test_conan_hate_speech_is_hate_and_counter_narratives_are_its_negatives(
    conan_root: Path,
) -> None:
    rows = list(hch.conan(conan_root))
    texts = {r.text: r for r in rows}
    assert "Les musulmans envahissent nos villes." not in texts  # English only
    hs = texts["Muslims are invading our towns."]
    assert hs.labels == {"hate": 1} and hs.subset == "hs:MUSLIMS"  # says nothing of threat
    cn = texts["Muslims have lived here for generations and are our neighbours."]
    assert cn.labels == {"hate": 0, "threat": 0} and cn.subset == "cn:MUSLIMS"
    # the quoted slogan inside a counter-narrative is still a negative
    quoted = texts["Saying 'women belong in the kitchen' is sexist, and it is wrong."]
    assert quoted.labels["hate"] == 0 and quoted.subset == "cn:WOMEN"
    # near-duplicates (same key) are kept once: the repeated CN and "...kitchen!!"
    assert len(rows) == len({r.key for r in rows}) == 6


def test_conan_paraphrases_and_replies_share_the_split_of_their_hate_speech(
    conan_root: Path,
) -> None:
    rows = list(hch.conan(conan_root))
    by_text = {r.text: r for r in rows}
    original = by_text["Muslims are invading our towns."]
    paraphrase = by_text["Our towns are being invaded by Muslims!"]
    reply = by_text["Muslims have lived here for generations and are our neighbours."]
    assert paraphrase.group == reply.group == original.group == original.key
    assert paraphrase.split == reply.split == original.split == hc.split_of(original.key)


def test_stormfront_keeps_hate_and_nohate_and_groups_sentences_by_post(tmp_path: Path) -> None:
    meta = "file_id,user_id,subforum_id,num_contexts,label\n" + "".join(
        f"{fid},1,1,0,{label}\n"
        for fid, label in [("100_1", "hate"), ("100_2", "noHate"), ("100_3", "relation"),
                           ("200_1", "idk/skip"), ("300_1", "hate")]
    )
    files = {"annotations_metadata.csv": meta}
    for fid, text in [("100_1", "They are  vermin ."), ("100_2", "See you at the meeting ."),
                      ("100_3", "And so are their kids ."), ("200_1", "hm ."),
                      ("300_1", "They should all go back .")]:
        files[f"all_files/{fid}.txt"] = text + "\n"
    write_tar(tmp_path / hch.STORMFRONT_TAR, files)
    rows = list(hch.stormfront(tmp_path))
    labels = {r.text: r.labels for r in rows}
    assert labels["They are vermin ."] == {"hate": 1}  # whitespace normalised
    assert labels["They should all go back ."] == {"hate": 1}
    assert "And so are their kids ." not in labels and "hm ." not in labels
    groups = {r.text: r.group for r in rows}
    assert groups["They are vermin ."] == "stormfront:100"
    # noHate is sampled in train/val only; when kept it shares its post's split
    kept = [r for r in rows if r.subset == "noHate"]
    assert all(r.split == hc.split_of("stormfront:100") for r in kept)


def test_stormfront_refuses_an_archive_without_its_labels(tmp_path: Path) -> None:
    write_tar(tmp_path / hch.STORMFRONT_TAR, {"all_files/1_1.txt": "x"})
    with pytest.raises(FileNotFoundError, match=r"annotations_metadata\.csv"):
        list(hch.stormfront(tmp_path))


def test_toxigen_splits_prompt_items_and_dedupes_across_files(tmp_path: Path) -> None:
    prompt = "- asians are all the same\\n- asians cannot drive\\n-"
    write_tar(
        tmp_path / hch.TOXIGEN_TAR,
        {
            "prompts/hate_asian_1k.txt": prompt + "\n" + prompt + "\n",
            "prompts/neutral_asian_1k.txt": "- asian americans are a diverse group\\n-\n",
            "demonstrations/race/hate_asian_sentences.txt": "asians cannot drive\n",
            "LICENSE.txt": "CDLA",
        },
    )
    rows = list(hch.toxigen(tmp_path))
    assert sorted((r.text, r.labels["hate"], r.subset) for r in rows) == [
        ("asian americans are a diverse group", 0, "neutral:asian"),
        ("asians are all the same", 1, "hate:asian"),
        ("asians cannot drive", 1, "hate:asian"),
    ]


def test_new_corpora_are_registered_with_provenance() -> None:
    for name in ("conan", "stormfront", "toxigen"):
        assert hc.TRAINING[name] is hch.READERS[name]
        source = hc.SOURCES[name]
        assert source["licence"] and source["files"] and source["where"]
