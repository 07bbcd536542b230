"""The model protocols: what a task may ask of a model, and nothing about how.

Each protocol is one or two methods (httpx-style) so a local ONNX model, an
OpenAI-compatible endpoint and a test double are interchangeable. Every backend also
has `start()`/`stop()` (the `Service` protocol): heavy sessions and HTTP clients are
built in `start()`, never at import or construction time.

Test doubles for all of these live in `grebe.inference.fakes`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeAlias, TypeVar, overload, runtime_checkable

import msgspec
import numpy as np

#: An image as a decoded HxWx3 (RGB, uint8) or HxW array, or a path to an image file.
ImageInput: TypeAlias = np.ndarray | str | Path

#: Label -> score in [0, 1]. Keys are the backend's labels (see each backend's `labels`).
Scores: TypeAlias = dict[str, float]

#: A chat message in the OpenAI shape: {"role": "system"|"user"|"assistant", "content": str}.
ChatMessage: TypeAlias = Mapping[str, str]

#: A JSON schema given as a plain dict (validated structurally by the backend).
JSONSchema: TypeAlias = Mapping[str, Any]

StructT = TypeVar("StructT", bound=msgspec.Struct)


class Segment(msgspec.Struct, frozen=True, kw_only=True):
    """One timed piece of a transcript (seconds from the start of the audio)."""

    start: float
    end: float
    text: str


class Transcript(msgspec.Struct, frozen=True, kw_only=True):
    """What a Transcriber returns. `language` is an ISO 639-1 code or None if unknown;
    `text` is empty (not None) when no speech was found."""

    text: str
    language: str | None = None
    segments: tuple[Segment, ...] = ()
    duration_s: float = 0.0


@runtime_checkable
class Service(Protocol):
    """Lifecycle shared by every backend. `start()` is idempotent; `stop()` releases
    threads, sessions and connections and fails calls still waiting in a batcher."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@runtime_checkable
class Embedder(Protocol):
    """Texts -> float32 array of shape [n, dim], each row L2-normalised (so a dot
    product is a cosine). An empty input returns an array of shape [0, dim]."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> np.ndarray: ...


@runtime_checkable
class TextClassifier(Protocol):
    """Texts -> one {label: score} dict per text, in input order."""

    @property
    def name(self) -> str: ...

    async def classify(self, texts: Sequence[str]) -> list[Scores]: ...


@runtime_checkable
class ImageClassifier(Protocol):
    """Images (arrays or paths) -> one {label: score} dict per image, in input order.
    An unreadable image raises grebe.errors.InferenceError naming it."""

    @property
    def name(self) -> str: ...

    async def classify_images(self, images: Sequence[ImageInput]) -> list[Scores]: ...


@runtime_checkable
class Transcriber(Protocol):
    """A WAV file (16 kHz mono preferred; backends resample) -> Transcript."""

    @property
    def name(self) -> str: ...

    async def transcribe(self, wav_path: str | Path) -> Transcript: ...


@runtime_checkable
class OCR(Protocol):
    """An image -> the text printed in it ('' when none)."""

    async def read_text(self, image: ImageInput) -> str: ...


@runtime_checkable
class ChatModel(Protocol):
    """Messages -> one JSON answer that is validated against `schema`.

    Given a msgspec.Struct type the result is an instance of it; given a JSON schema
    dict the result is the decoded JSON (checked for the schema's required keys and
    top-level types). Raises grebe.errors.InferenceError when the model cannot produce
    a valid answer (after its repair attempt) and CircuitOpenError when the backend is
    known to be down."""

    @property
    def name(self) -> str: ...

    @overload
    async def complete_json(
        self, messages: Sequence[ChatMessage], schema: type[StructT]
    ) -> StructT: ...

    @overload
    async def complete_json(self, messages: Sequence[ChatMessage], schema: JSONSchema) -> Any: ...

    async def complete_json(
        self, messages: Sequence[ChatMessage], schema: type[msgspec.Struct] | JSONSchema
    ) -> Any: ...
