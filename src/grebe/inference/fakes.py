"""Test doubles for the model protocols: deterministic, instant, dependency-free.

Use them in unit tests of flows, media and feed code, or to run the pipeline without
model weights. None of them is a model: their outputs carry no meaning beyond being
stable and shaped like the real thing.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from grebe.errors import InferenceError
from grebe.inference.base import (
    ChatMessage,
    EncodedText,
    ImageInput,
    Scores,
    Span,
    Transcript,
)
from grebe.inference.schema import SchemaValidationError, repair_messages, validate_json


def _is_file(path: str | Path) -> bool:
    # One stat() of a local file: cheap enough for a test double to do on the loop.
    return Path(path).is_file()


class _NoLifecycle:
    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None


class HashEmbedder(_NoLifecycle):
    """Test double: a bag of hashed word tokens, L2-normalised. Texts sharing words are
    closer than texts that share none, so similarity-based code has something to test;
    identical texts give identical vectors across processes (blake2b, not hash())."""

    def __init__(self, dim: int = 384, name: str = "hash-embedder") -> None:
        if dim < 1:
            raise ValueError("dim must be >= 1")
        self._dim = dim
        self._name = name
        self.calls = 0  # number of embed() calls, for tests of memoisation

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def pools_parts(self) -> bool:
        return True  # a bag of hashed words: a part's words sum inside the text's

    def _sum(self, text: str, *, empty: bool = True) -> np.ndarray:
        vec = np.zeros(self._dim, dtype=np.float32)
        tokens = text.lower().split() or ([""] if empty else [])
        for token in tokens:
            digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
            idx = int.from_bytes(digest[:4], "little") % self._dim
            sign = 1.0 if digest[4] & 1 else -1.0
            vec[idx] += sign
        return vec

    def _vector(self, text: str) -> np.ndarray:
        vec = self._sum(text)
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm else vec

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        return np.stack([self._vector(t) for t in texts])

    async def embed_parts(self, text: str, spans: Sequence[Span]) -> EncodedText:
        """Like MiniLM's: the parts' word sums from the text's one call."""
        self.calls += 1
        sums = np.array([self._sum(text[a:b], empty=False) for a, b in spans],
                        dtype=np.float32).reshape(len(spans), self._dim)
        return EncodedText(vector=self._vector(text), part_sums=sums,
                           part_tokens=np.array([len(text[a:b].split()) for a, b in spans],
                                                dtype=np.int64),
                           frame=self._sum(text) - sums.sum(axis=0))


class KeywordClassifier(_NoLifecycle):
    """Test double: score 1.0 for `label` when any keyword occurs in the text, else 0."""

    def __init__(
        self, keywords: Iterable[str], label: str = "flagged", name: str = "keyword-classifier"
    ) -> None:
        self.keywords = tuple(k.lower() for k in keywords)
        self.label = label
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    async def classify(self, texts: Sequence[str]) -> list[Scores]:
        return [
            {self.label: 1.0 if any(k in t.lower() for k in self.keywords) else 0.0} for t in texts
        ]


class ConstantImageClassifier(_NoLifecycle):
    """Test double: the same scores for every image (paths must exist, like the real
    backends, so error paths stay testable)."""

    def __init__(self, scores: Scores, name: str = "constant-image-classifier") -> None:
        self.scores = dict(scores)
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    async def classify_images(self, images: Sequence[ImageInput]) -> list[Scores]:
        for image in images:
            if isinstance(image, str | Path) and not _is_file(image):
                raise InferenceError(f"image not found: {image}")
        return [dict(self.scores) for _ in images]


class FixedTranscriber(_NoLifecycle):
    """Test double: returns the given transcript for every existing file."""

    def __init__(self, text: str = "", language: str | None = "en") -> None:
        self.text = text
        self.language = language
        self.calls: list[Path] = []

    @property
    def name(self) -> str:
        return "fixed-transcriber"

    async def transcribe(self, wav_path: str | Path) -> Transcript:
        path = Path(wav_path)
        if not _is_file(path):
            raise InferenceError(f"audio file not found: {path}")
        self.calls.append(path)
        return Transcript(text=self.text, language=self.language if self.text else None)


class FixedOCR(_NoLifecycle):
    """Test double: returns the same text for every image."""

    def __init__(self, text: str = "") -> None:
        self.text = text

    async def read_text(self, image: ImageInput) -> str:
        return self.text


class ScriptedChatModel(_NoLifecycle):
    """Test double: answers from a script of raw JSON strings (or a function of the
    messages), validated exactly like the real client — including one repair attempt,
    so a script of [bad, good] exercises the repair path. Records every request."""

    def __init__(
        self,
        answers: Iterable[str | Mapping[str, Any]] | Callable[[Sequence[ChatMessage]], str] = (),
        name: str = "scripted-chat",
    ) -> None:
        self._fn = answers if callable(answers) else None
        self._queue: deque[str] = deque(
            ()
            if callable(answers)
            else (a if isinstance(a, str) else msgspec.json.encode(a).decode() for a in answers)
        )
        self._name = name
        self.requests: list[list[dict[str, str]]] = []

    @property
    def name(self) -> str:
        return self._name

    def _next(self, messages: Sequence[ChatMessage]) -> str:
        self.requests.append([dict(m) for m in messages])
        if self._fn is not None:
            return self._fn(messages)
        if not self._queue:
            raise InferenceError("scripted chat model has no answers left")
        return self._queue.popleft()

    async def complete_json(self, messages: Sequence[ChatMessage], schema: Any) -> Any:
        raw = self._next(messages)
        try:
            return validate_json(raw, schema)
        except SchemaValidationError as exc:
            repair = repair_messages([dict(m) for m in messages], raw, exc)
            return validate_json(self._next(repair), schema)
