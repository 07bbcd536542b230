"""The model protocols: what a task may ask of a model, and nothing about how.

Each protocol is one or two methods (httpx-style) so a local ONNX model, an
OpenAI-compatible endpoint and a test double are interchangeable. Every backend also
has `start()`/`stop()` (the `Service` protocol): heavy sessions and HTTP clients are
built in `start()`, never at import or construction time.

Test doubles for all of these live in `grebe.inference.fakes`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


#: A part of a text as [start, end) character offsets (a sentence, for summaries).
Span: TypeAlias = tuple[int, int]


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return (vector / norm if norm > 0.0 else vector).astype(np.float32)


@dataclass(frozen=True, slots=True, eq=False)
class EncodedText:
    """One text's embedding and its parts (sentences) as read inside it, from one
    encoder pass: a summary ranks the sentences and embeds the ones it keeps without
    encoding them again (docs/benchmarks.md, Real flows: 1.76 encoder inputs per post
    where 1 does).

    A mean-pooling encoder fills `part_sums` with the sum of each part's token vectors
    and `frame` with the rest of the text's tokens (CLS, SEP), so `pooled(every part)`
    is `vector` itself; an encoder without token outputs embeds each part on its own
    (`part_sums` = the parts' vectors, `frame` = 0)."""

    vector: np.ndarray  # [dim] L2-normalised: what embed([text]) returns
    part_sums: np.ndarray  # [m, dim] float32, one row per span asked for
    part_tokens: np.ndarray  # [m] tokens each part kept (0: cut off by truncation)
    frame: np.ndarray  # [dim]: tokens of the text outside every part

    def part_vectors(self) -> np.ndarray:
        """[m, dim] L2-normalised parts (rows of parts with no tokens stay zero)."""
        norms = np.linalg.norm(self.part_sums, axis=1, keepdims=True)
        return (self.part_sums / np.clip(norms, 1e-12, None)).astype(np.float32)

    def pooled(self, parts: Sequence[int]) -> np.ndarray:
        """L2-normalised vector of the chosen parts with the text's frame tokens: the
        embedding of those parts as they read in the whole text."""
        return _unit(self.frame + self.part_sums[list(parts)].sum(axis=0))


async def encode_parts_separately(
    embedder: Embedder, text: str, spans: Sequence[Span]
) -> EncodedText:
    """`embed_parts` for encoders without token outputs (a remote endpoint, a test
    double): the text and each part embedded in one call."""
    rows = await embedder.embed([text, *(text[a:b] for a, b in spans)])
    return EncodedText(vector=rows[0], part_sums=rows[1:].astype(np.float32),
                       part_tokens=np.ones(len(spans), dtype=np.int64),
                       frame=np.zeros(rows.shape[1], dtype=np.float32))


@runtime_checkable
class Embedder(Protocol):
    """Texts -> float32 array of shape [n, dim], each row L2-normalised (so a dot
    product is a cosine). An empty input returns an array of shape [0, dim].
    `embed_parts` also returns the given parts of one text as read inside it
    (`EncodedText`); with no spans it costs what `embed([text])` does. `pools_parts`
    says whether the parts come free with the text's own pass (token outputs) or cost
    an input each (`encode_parts_separately`)."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def pools_parts(self) -> bool: ...

    async def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    async def embed_parts(self, text: str, spans: Sequence[Span]) -> EncodedText: ...


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
