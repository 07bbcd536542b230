"""Models that load on first use, and models that load together.

An engine should not pay, before its first post, for models its plans may never call:
the media models (Open-NSFW, Tesseract, Whisper) only serve posts with media, and the
pre-heads text models (alt-profanity-check, HateSonar, the e-mail spam head) only serve
when the trained heads are off or lack a head. A `Lazy*` wrapper takes a *builder*, so
the backend is neither constructed nor loaded until a call needs it; its `start()` does
nothing and its `stop()` stops what was loaded.

Fail closed: a load that fails raises ModelUnavailableError (a system fault: the post
is retried, never judged without the model), and the failure is remembered for
LAZY_LOAD_RETRY_S so a broken model costs one failed load per window, not one per post.

`StartTogether` starts the models that must load before the first post concurrently:
each backend loads in a worker thread (onnxruntime session creation and most of
unpickling release the GIL), so start-up costs about the slowest load, not the sum.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from grebe import constants as C
from grebe.errors import InferenceError, ModelUnavailableError
from grebe.inference.base import ImageInput, Scores, Transcript

log = logging.getLogger(__name__)


class LazyService:
    """A backend built and started by the first call that needs it (`ready()`)."""

    def __init__(self, build: Callable[[], Any], name: str) -> None:
        self._build, self._name = build, name
        self._inner: Any = None
        self._loading: asyncio.Future[None] | None = None
        self._failure: tuple[float, BaseException] | None = None
        #: How many times the backend was built and started (tests and metrics read it).
        self.loads = 0

    @property
    def name(self) -> str:
        """The backend's own name once loaded (versions read from its weights)."""
        return str(self._inner.name) if self._inner is not None else self._name

    @property
    def loaded(self) -> bool:
        return self._inner is not None

    async def start(self) -> None:
        """Nothing: loading waits for the first call that needs the model."""

    async def stop(self) -> None:
        if self._loading is not None:  # a load under way finishes first, then is undone
            await asyncio.gather(self._loading, return_exceptions=True)
        inner, self._inner, self._failure = self._inner, None, None
        if inner is not None:
            await inner.stop()

    async def ready(self) -> Any:
        """The started backend, loading it now if this is the first call. The load runs
        as its own task: a caller cancelled while it waits (its task timed out) leaves
        the load going for the next caller instead of abandoning a half-built model."""
        if self._inner is not None:
            return self._inner
        if self._failure is not None:
            when, exc = self._failure
            if time.monotonic() - when < C.LAZY_LOAD_RETRY_S:
                raise ModelUnavailableError(f"{self._name} failed to load: {exc}") from exc
            self._failure = None
        if self._loading is None:  # concurrent first calls wait for one load
            self._loading = asyncio.ensure_future(self._load())
        await asyncio.shield(self._loading)
        return self._inner

    async def _load(self) -> None:
        try:
            inner = self._build()
            await inner.start()
        except Exception as exc:
            self._failure = (time.monotonic(), exc)
            log.error("model %s failed to load on first use: %s", self._name, exc)
            raise ModelUnavailableError(f"{self._name} failed to load: {exc}") from exc
        finally:
            self._loading = None
        self._inner = inner
        self.loads += 1
        log.info("model %s loaded on first use", self.name)


class LazyTextClassifier(LazyService):
    async def classify(self, texts: Sequence[str]) -> list[Scores]:
        return list(await (await self.ready()).classify(texts))


class LazyImageClassifier(LazyService):
    async def classify_images(self, images: Sequence[ImageInput]) -> list[Scores]:
        return list(await (await self.ready()).classify_images(images))


class LazyOCR(LazyService):
    async def read_text(self, image: ImageInput) -> str:
        return str(await (await self.ready()).read_text(image))


class LazyTranscriber(LazyService):
    async def transcribe(self, wav_path: str | Path) -> Transcript:
        transcript: Transcript = await (await self.ready()).transcribe(wav_path)
        return transcript


class LazySpamScorer(LazyService):
    """The e-mail spam head, whose `score()` is synchronous (a dot product on the loop):
    callers `await ensure_ready(scorer)` first."""

    def score(self, embeddings: np.ndarray) -> np.ndarray:
        if self._inner is None:
            raise InferenceError(f"{self._name}: score() before ensure_ready()")
        result: np.ndarray = self._inner.score(embeddings)
        return result


async def ensure_ready(backend: Any) -> None:
    """Load `backend` now if it is lazy (a no-op for backends started with the engine)."""
    if isinstance(backend, LazyService):
        await backend.ready()


class StartTogether:
    """Backends started concurrently and stopped together: one bundle component. If any
    fails to start, those that started are stopped and the first failure is raised, so a
    model that must load at start is still a clear start error."""

    def __init__(self, parts: Sequence[Any]) -> None:
        self.parts: list[Any] = []
        for part in parts:  # one model may serve twice (an embedder shared by the heads)
            if all(part is not seen for seen in self.parts):
                self.parts.append(part)
        self._started: list[Any] = []

    async def start(self) -> None:
        results = await asyncio.gather(*(p.start() for p in self.parts), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        self._started = [p for p, r in zip(self.parts, results, strict=True)
                         if not isinstance(r, BaseException)]
        if failures:
            await self.stop()
            raise failures[0]

    async def stop(self) -> None:
        errors: list[BaseException] = []
        while self._started:
            try:
                await self._started.pop().stop()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
