"""Small local text classifiers: language id, offensive language, hate speech.

Each is a TextClassifier behind a MicroBatcher: loading happens in `start()` on a
thread (scikit-learn's import alone takes seconds), and predictions run on the
batcher's thread so the event loop never computes. These models are small and fast
(well under a millisecond per text), so a thread is enough; the GIL they hold is held
briefly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from grebe.errors import InferenceError
from grebe.inference.base import Scores
from grebe.inference.local import BatchedLocalModel, check_texts

OFFENSIVE = "offensive"
HATE_SPEECH = "hate_speech"
OFFENSIVE_LANGUAGE = "offensive_language"
NEITHER = "neither"
_SONAR_LABELS = {0: HATE_SPEECH, 1: OFFENSIVE_LANGUAGE, 2: NEITHER}


class LanguageIdClassifier(BatchedLocalModel[str, Scores]):
    """py3langid (97 languages): the `top_k` most likely ISO 639-1 codes with normalised
    probabilities. Text with no letters gives {} (no guess beats a wrong one)."""

    def __init__(self, top_k: int = 3, languages: Sequence[str] | None = None) -> None:
        super().__init__(name="py3langid", batching={"max_batch_size": 64})
        self.top_k = top_k
        self.languages = list(languages) if languages else None
        self._identifier: Any = None

    def _load(self) -> None:
        # Decoded once per machine, not at every start (grebe.inference.langid_model).
        from grebe.inference.langid_model import load_identifier

        self._identifier = load_identifier(self.languages)

    def _predict(self, items: list[str]) -> list[Scores]:
        out: list[Scores] = []
        for text in items:
            if not any(ch.isalpha() for ch in text):
                out.append({})
                continue
            ranked = self._identifier.rank(text)[: self.top_k]
            out.append({lang: float(p) for lang, p in ranked})
        return out

    async def classify(self, texts: Sequence[str]) -> list[Scores]:
        return await self._submit_many(check_texts(texts, self.name))

    async def detect(self, text: str) -> tuple[str | None, float]:
        """(language, probability) of one text; (None, 0.0) when there is no guess."""
        (scores,) = await self.classify([text])
        if not scores:
            return None, 0.0
        lang = max(scores, key=lambda k: scores[k])
        return lang, scores[lang]


class ProfanityClassifier(BatchedLocalModel[str, Scores]):
    """alt-profanity-check (linear SVM on word n-grams): {"offensive": p}."""

    def __init__(self) -> None:
        super().__init__(name="alt-profanity-check", batching={"max_batch_size": 128})
        self._predict_prob: Any = None

    def _load(self) -> None:
        from profanity_check import predict_prob

        self._predict_prob = predict_prob

    def _predict(self, items: list[str]) -> list[Scores]:
        probs = self._predict_prob(items)
        return [{OFFENSIVE: float(p)} for p in probs]

    async def classify(self, texts: Sequence[str]) -> list[Scores]:
        return await self._submit_many(check_texts(texts, self.name))


class HateSonarClassifier(BatchedLocalModel[str, Scores]):
    """HateSonar (ONNX): {"hate_speech", "offensive_language", "neither"} probabilities.

    The model's StringNormalizer asks for the en_US.UTF-8 locale, which slim images
    lack. If the stock model cannot load for that reason, the node is set to the "C"
    locale instead (the model is English; ASCII lower-casing is what it needs)."""

    def __init__(self, model_file: str | None = None) -> None:
        super().__init__(name="hatesonar", batching={"max_batch_size": 64})
        self.model_file = model_file
        self.patched_locale = False
        self._session: Any = None

    def _load(self) -> None:
        import onnxruntime as ort
        from hatesonar.api import DEFAULT_MODEL_FILE

        path = str(self.model_file or DEFAULT_MODEL_FILE)
        providers = ["CPUExecutionProvider"]
        try:
            self._session = ort.InferenceSession(path, providers=providers)
            return
        except Exception as exc:  # onnxruntime's Fail has no stable type
            if "locale" not in str(exc):
                raise InferenceError(f"cannot load hatesonar model {path}: {exc}") from exc
        self._session = ort.InferenceSession(_with_c_locale(path), providers=providers)
        self.patched_locale = True

    def _predict(self, items: list[str]) -> list[Scores]:
        _, probs = self._session.run(None, {"text": np.array(items, dtype=object)})
        return [{_SONAR_LABELS[k]: float(row[k]) for k in _SONAR_LABELS} for row in probs]

    async def classify(self, texts: Sequence[str]) -> list[Scores]:
        return await self._submit_many(check_texts(texts, self.name))


def _with_c_locale(path: str) -> bytes:
    """The model bytes with every StringNormalizer node set to the "C" locale."""
    import onnx

    model = onnx.load(path)
    for node in model.graph.node:
        if node.op_type == "StringNormalizer":
            kept = [a for a in node.attribute if a.name != "locale"]
            del node.attribute[:]
            node.attribute.extend([*kept, onnx.helper.make_attribute("locale", "C")])
    return model.SerializeToString()
