"""Test doubles for flow services: instant, deterministic, shaped like the real models."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from grebe.flows.services import MediaFacts
from grebe.inference.fakes import HashEmbedder
from grebe.types import Post

HATE_WORDS = ("vermin", "subhuman")
OFFENSIVE_WORDS = ("idiot", "stupid", "damn")
SPAM_TEXT = "buy cheap pills now click here free money offer"


class WordsClassifier:
    """{"hate": 0.95 if a hate word occurs, "offensive": 0.9 if an offensive word}."""

    def __init__(self, labels: dict[str, tuple[str, ...]], name: str) -> None:
        self.labels, self._name = labels, name

    @property
    def name(self) -> str:
        return self._name

    async def classify(self, texts: Sequence[str]) -> list[dict[str, float]]:
        return [{label: 0.95 if any(w in t.lower() for w in words) else 0.02
                 for label, words in self.labels.items()} for t in texts]


class DirectionSpamHead:
    """Spam probability = cosine with the embedding of a typical spam text, clipped."""

    name = "direction-spam-head"

    def __init__(self, embedder: HashEmbedder) -> None:
        self._direction = embedder._vector(SPAM_TEXT)

    def score(self, embeddings: np.ndarray) -> np.ndarray:
        return np.clip(embeddings @ self._direction, 0.0, 1.0)


class FakeMedia:
    """Returns the same facts for every post with media; counts hydrations."""

    def __init__(self, facts: MediaFacts) -> None:
        self.facts, self.calls = facts, 0

    async def hydrate(self, post: Post) -> MediaFacts:
        self.calls += 1
        return self.facts


class RecordingProducer:
    def __init__(self) -> None:
        self.published: list[tuple[str, bytes | None, bytes]] = []

    async def publish(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.published.append((topic, key, value))

    async def publish_many(self, topic: str,
                           records: Sequence[tuple[bytes | None, bytes]]) -> None:
        self.published.extend((topic, key, value) for key, value in records)


class RememberingEmbedder(HashEmbedder):
    """HashEmbedder that remembers which text each vector came from, so a heads double
    can 'read' the text behind an embedding (the real heads read the vector itself)."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: dict[bytes, str] = {}

    def _vector(self, text: str) -> np.ndarray:
        vec = super()._vector(text)
        self.texts[vec.tobytes()] = text
        return vec


@dataclass(frozen=True)
class HeadInfoDouble:
    """Same fields as grebe.inference.heads.HeadInfo."""

    classes: tuple[str, ...]
    languages: tuple[str, ...]
    thresholds: dict[str, float]
    target_fpr: float = 0.01
    sources: tuple[str, ...] = ("test-double",)


HEAD_WORDS = {
    "spam": ("buy", "click", "free", "offer", "pills", "cheap"),
    "offensive": ("idiot", "stupid", "fucking", "damn", "shit", "moron"),
    "hate": ("vermin", "subhuman", "locusts"),  # "locusts": hate with no hostile word
    "threat": ("find where you live", "going to hurt you", "kill you"),
}
INDIVIDUAL_WORDS = ("you", "you're", "your", "u")
GROUP_WORDS = ("immigrants", "they all", "those people")


class KeywordHeads:
    """TextHeads double: the same interface (version, embedder, heads, predict), scoring
    each head by keywords of the text behind the embedding. Spam needs two keywords."""

    version = "heads-test-1"

    def __init__(self, embedder: RememberingEmbedder, languages: tuple[str, ...] = ("en",)):
        self._embedder = embedder
        self.embedder = embedder.name
        binary = {"spam": ("ham", "spam"), "offensive": ("none", "offensive"),
                  "hate": ("none", "hate"), "threat": ("none", "threat")}
        self.heads = {name: HeadInfoDouble(classes, languages, {classes[1]: 0.5})
                      for name, classes in binary.items()}
        self.heads["target"] = HeadInfoDouble(
            ("untargeted", "individual", "group", "other"), languages,
            {"individual": 0.5, "group": 0.5})
        self.calls = 0

    def _row(self, text: str) -> dict[str, np.ndarray]:
        low = text.lower()
        tokens = set(low.replace("!", " ").replace(",", " ").replace(".", " ").split())

        def hits(words: tuple[str, ...]) -> int:
            return sum((w in low) if " " in w else (w in tokens) for w in words)

        def binary(p: float) -> np.ndarray:
            return np.array([1 - p, p], dtype=np.float32)

        individual = hits(INDIVIDUAL_WORDS) > 0
        group = hits(GROUP_WORDS) > 0
        target = [0.1, 0.8 if individual else 0.1, 0.8 if group else 0.1, 0.0]
        if not (individual or group):
            target[0] = 0.9
        return {
            "spam": binary(0.95 if hits(HEAD_WORDS["spam"]) >= 2 else 0.05),
            "offensive": binary(0.9 if hits(HEAD_WORDS["offensive"]) else 0.03),
            "hate": binary((0.75 if "not" in tokens else 0.95) if hits(HEAD_WORDS["hate"])
                           else 0.02),
            "threat": binary(0.93 if hits(HEAD_WORDS["threat"]) else 0.02),
            "target": np.array(target, dtype=np.float32) / sum(target),
        }

    def predict(self, embeddings: np.ndarray,
                texts: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        self.calls += 1
        rows = [self._row(self._embedder.texts[row.tobytes()]) for row in embeddings]
        return {name: np.stack([r[name] for r in rows]) for name in self.heads}
