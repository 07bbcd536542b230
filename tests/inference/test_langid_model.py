"""py3langid's model decoded once per machine (grebe.inference.langid_model): the same
guesses as py3langid's own loader, the cache read on later loads, and a cache that cannot
be written or read costing only the slow path."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
from py3langid.langid import MODEL_FILE, LanguageIdentifier

from grebe.inference import langid_model
from grebe.inference.machine_cache import CACHE_ENV
from grebe.inference.text import LanguageIdClassifier

TWEETS = Path(__file__).resolve().parents[2] / "bench" / "data" / "tweets.jsonl"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    return tmp_path


@pytest.fixture(scope="module")
def texts() -> list[str]:
    lines = TWEETS.read_text().splitlines()[:600]
    return [json.loads(line)["text"] for line in lines] + ["", "12345", "Ceci est un test."]


@pytest.fixture(scope="module")
def reference() -> LanguageIdentifier:
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def test_cached_model_guesses_as_py3langid_does(
    cache: Path, texts: list[str], reference: LanguageIdentifier,
) -> None:
    first = langid_model.load_identifier()  # decodes and writes the cache
    assert list((cache / "py3langid").iterdir())
    second = langid_model.load_identifier()  # reads it
    for identifier in (first, second):
        assert [identifier.rank(t)[:3] for t in texts] == [reference.rank(t)[:3] for t in texts]


def test_restricted_languages_match_too(cache: Path, texts: list[str]) -> None:
    reference = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    reference.set_languages(["en", "fr", "de"])
    langid_model.load_identifier()
    cached = langid_model.load_identifier(["en", "fr", "de"])
    assert [cached.rank(t) for t in texts] == [reference.rank(t) for t in texts]


def test_a_later_load_does_not_decode(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    langid_model.load_identifier()

    def no_decode(source: Path) -> dict[str, np.ndarray]:
        raise AssertionError("decoded again although the cache holds the model")

    monkeypatch.setattr(langid_model, "_decode", no_decode)
    assert langid_model.load_identifier().classify("the cat sat on the mat")[0] == "en"


def test_a_damaged_cache_is_decoded_again(cache: Path) -> None:
    langid_model.load_identifier()
    (directory,) = (cache / "py3langid").iterdir()
    table = directory / "nextmove.npy"
    table.write_bytes(table.read_bytes()[:1000])  # cut short
    assert langid_model.load_identifier().classify("the cat sat on the mat")[0] == "en"
    assert langid_model._read(directory) is not None  # written again, whole


def test_an_unwritable_cache_still_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(CACHE_ENV, str(blocker / "cache"))
    with caplog.at_level(logging.WARNING, logger=langid_model.__name__):
        identifier = langid_model.load_identifier()
    assert identifier.classify("the cat sat on the mat")[0] == "en"
    assert "cannot cache" in caplog.text


async def test_the_classifier_loads_through_the_cache(cache: Path) -> None:
    classifier = LanguageIdClassifier()
    await classifier.start()
    try:
        (scores,) = await classifier.classify(["the cat sat on the mat"])
    finally:
        await classifier.stop()
    assert max(scores, key=scores.__getitem__) == "en"
    assert list((cache / "py3langid").iterdir())


def test_prepare_fills_the_cache(cache: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", langid_model.__name__, "prepare"], check=True,
                         capture_output=True, text=True, env={**os.environ}).stdout.strip()
    assert Path(out).parent == cache / "py3langid"
    assert langid_model._read(Path(out)) is not None
