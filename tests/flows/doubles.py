"""Test doubles for flow services: instant, deterministic, shaped like the real models."""

from __future__ import annotations

from collections.abc import Sequence

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
