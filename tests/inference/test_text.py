"""The real local text classifiers: language id, offensive language, hate speech."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from grebe.errors import InferenceError
from grebe.inference.base import TextClassifier
from grebe.inference.text import (
    HATE_SPEECH,
    NEITHER,
    OFFENSIVE,
    HateSonarClassifier,
    LanguageIdClassifier,
    ProfanityClassifier,
)


@pytest.fixture
async def langid() -> AsyncIterator[LanguageIdClassifier]:
    model = LanguageIdClassifier()
    await model.start()
    yield model
    await model.stop()


async def test_language_id_on_real_sentences(langid: LanguageIdClassifier) -> None:
    assert isinstance(langid, TextClassifier)
    texts = [
        "The weather is lovely today and we are going to the beach.",
        "Le temps est magnifique aujourd'hui et nous allons à la plage.",
        "Das Wetter ist heute herrlich und wir gehen an den Strand.",
        "El tiempo es estupendo hoy y vamos a la playa.",
        "12345 !!! :)",
    ]
    results = await langid.classify(texts)
    assert [max(r, key=lambda k: r[k]) if r else None for r in results] == [
        "en",
        "fr",
        "de",
        "es",
        None,
    ]
    assert all(0.0 <= p <= 1.0 for r in results for p in r.values())
    assert await langid.detect("Ciao, come stai? Tutto bene grazie.") == (
        "it",
        pytest.approx(1.0, abs=0.2),
    )


async def test_bad_input_is_a_clear_error(langid: LanguageIdClassifier) -> None:
    with pytest.raises(InferenceError, match="not one string"):
        await langid.classify("just a string")  # type: ignore[arg-type]
    with pytest.raises(InferenceError, match="not strings"):
        await langid.classify(["ok", None])  # type: ignore[list-item]
    assert await langid.classify([]) == []


@pytest.mark.slow  # importing scikit-learn takes several seconds on a busy CPU
async def test_offensive_text_scores_higher_than_benign() -> None:
    model = ProfanityClassifier()
    await model.start()
    try:
        benign, rude = await model.classify(
            ["Thanks for sharing, what a lovely photo of your garden!", "shut up you fucking idiot"]
        )
    finally:
        await model.stop()
    assert rude[OFFENSIVE] > 0.8 > 0.3 > benign[OFFENSIVE]


async def test_hatesonar_scores_and_survives_a_missing_locale() -> None:
    model = HateSonarClassifier()
    await model.start()
    try:
        benign, hateful = await model.classify(
            ["Have a wonderful day, friend.", "I hate you, you stupid idiot, go die"]
        )
    finally:
        await model.stop()
    assert set(benign) == {HATE_SPEECH, "offensive_language", NEITHER}
    assert sum(benign.values()) == pytest.approx(1.0, abs=1e-4)
    assert benign[NEITHER] > 0.5
    assert hateful[NEITHER] < benign[NEITHER]
    assert hateful[HATE_SPEECH] + hateful["offensive_language"] > 0.5
