"""The models and the media service flows use. Every backend is built by
grebe.inference.factory from the config's `inference` section (its docstring lists the
keys); what is flow-specific stays here: which models the plans hold, the label names
flows read, py3langid only when a plan filters by language, and the media pipeline as a
MediaHydrator. Built, not started: the bundle starts them in the engine process, loading
weights there.

Only what the plans call is loaded, once: the media models (NSFW, OCR, Whisper) load on
the first post with media, the pre-heads text models (profanity, HateSonar, e-mail spam
head) only if the trained heads are off or lack a head they would stand in for
(grebe.inference.lazy), and the models every text post needs load in parallel at start.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from grebe.errors import InferenceError
from grebe.flows.services import MediaFacts
from grebe.inference.base import ChatModel, Embedder, Service, TextClassifier
from grebe.inference.factory import (
    build_chat_model,
    build_embedder,
    build_hate_classifier,
    build_language_id,
    build_nsfw,
    build_ocr,
    build_offensive_classifier,
    build_spam_head,
    build_transcriber,
)
from grebe.inference.lazy import (
    LazyImageClassifier,
    LazyOCR,
    LazyService,
    LazySpamScorer,
    LazyTextClassifier,
    LazyTranscriber,
    StartTogether,
)
from grebe.inference.settings import InferenceConfig
from grebe.inference.text import HATE_SPEECH, OFFENSIVE_LANGUAGE
from grebe.types import Post

if TYPE_CHECKING:
    from grebe.config import GrebeConfig
    from grebe.core.peers import Peers
    from grebe.flows.services import MediaHydrator, SpamScorer, TextHeadScorer
    from grebe.flows.settings import FlowSettings

_HATE_KEYS = {"hate": HATE_SPEECH, "offensive": OFFENSIVE_LANGUAGE}
MEDIA_PIPELINE = "media pipeline"  # the lazy hydrator's name in logs and errors


@dataclass
class FlowModels:
    embedder: Embedder
    offensive: TextClassifier
    hate: TextClassifier
    spam_head: SpamScorer
    language: TextClassifier | None = None
    chat: ChatModel | None = None
    nsfw: Any = None  # ImageClassifier, used by the media pipeline
    ocr: Any = None  # OCR, used by the media pipeline
    transcriber: Any = None  # Transcriber, used by the media pipeline's ASR
    heads: TextHeadScorer | None = None  # the trained text heads on the shared embedding
    _together: StartTogether | None = field(default=None, init=False, repr=False)

    def components(self) -> list[Any]:
        """What has a start()/stop() lifecycle: the models loaded at start as one
        component that loads them in parallel, then the lazy ones (whose start is a
        no-op and whose stop unloads what a post made them load)."""
        # Every model field, in declaration order: a new model is one new field.
        parts = [p for p in (getattr(self, f.name) for f in fields(self) if f.init)
                 if isinstance(p, Service)]
        eager = StartTogether([p for p in parts if not _is_lazy(p)])
        # The same group on every call: callers start one list and stop another.
        same = self._together is not None and len(self._together.parts) == len(eager.parts) \
            and all(a is b for a, b in zip(self._together.parts, eager.parts, strict=True))
        if not same:
            self._together = eager
        return [self._together, *(p for p in parts if _is_lazy(p))]


class HeadsService:
    """The trained text heads as a bundle component: weights load in start(), inside
    the engine process (like every model), and the heads must have been trained on the
    embedder the flows use (heads on another encoder's space would be noise)."""

    def __init__(self, path: Path | None, embedder: Embedder) -> None:
        self.path, self._embedder = path, embedder
        self._heads: Any = None
        self._view: Mapping[str, Any] | None = None

    @property
    def name(self) -> str:
        return f"heads:{self.version}"

    @property
    def version(self) -> str:
        return str(self._loaded().version)

    @property
    def embedder(self) -> str:
        return str(self._loaded().embedder)

    @property
    def heads(self) -> Mapping[str, Any]:
        """The heads by name, read-only: read ~90 times per post by the flows' judge,
        so one view made at start() instead of a copy per read."""
        if self._view is None:
            raise InferenceError("the text heads are used before start()")
        return self._view

    def _loaded(self) -> Any:
        if self._heads is None:
            raise InferenceError("the text heads are used before start()")
        return self._heads

    async def start(self) -> None:
        from grebe.inference.heads import TextHeads  # type: ignore[import-not-found,unused-ignore]

        heads = await asyncio.to_thread(TextHeads.load, self.path)
        if heads.embedder != self._embedder.name:
            raise InferenceError(f"text heads {heads.version} were trained on {heads.embedder}"
                                 f", but the flows embed with {self._embedder.name}")
        self._heads = heads
        self._view = MappingProxyType(dict(heads.heads))

    async def stop(self) -> None:
        self._heads = self._view = None

    def predict(self, embeddings: np.ndarray,
                texts: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        return dict(self._loaded().predict(embeddings, texts))


def _is_lazy(part: Any) -> bool:
    return isinstance(part.inner if isinstance(part, HateLabels) else part, LazyService)


def heads_available() -> bool:
    """Whether this build ships grebe.inference.heads (the trained heads module)."""
    return importlib.util.find_spec("grebe.inference.heads") is not None


class HateLabels:
    """HateSonar's labels (hate_speech, offensive_language) under the names flows use."""

    def __init__(self, inner: TextClassifier) -> None:
        self.inner = inner

    @property
    def name(self) -> str:
        return self.inner.name

    async def start(self) -> None:
        await self.inner.start()  # type: ignore[attr-defined]

    async def stop(self) -> None:
        await self.inner.stop()  # type: ignore[attr-defined]

    async def classify(self, texts: Any) -> list[dict[str, float]]:
        rows = await self.inner.classify(texts)
        return [{ours: row.get(theirs, 0.0) for ours, theirs in _HATE_KEYS.items()}
                for row in rows]


def build_models(config: GrebeConfig, settings: FlowSettings) -> FlowModels:
    """The `inference` section through the factory's builders. py3langid always (unless
    switched off): every annotation records the post's language and text models abstain
    outside theirs (grebe.flows.language). With the trained heads on, the pre-heads
    text models are only fallbacks (grebe.flows.shared uses a head when it has one), so
    they are built lazily; the media models always are (text posts never call them)."""
    cfg = config.inference
    heads = settings.heads and heads_available()
    models = FlowModels(
        embedder=build_embedder(cfg),
        offensive=_text_model(cfg, build_offensive_classifier, "alt-profanity-check",
                              lazy=heads),
        hate=HateLabels(_text_model(cfg, build_hate_classifier, "hatesonar", lazy=heads)),
        spam_head=(LazySpamScorer(lambda: build_spam_head(cfg), "spam-head") if heads
                   else build_spam_head(cfg)),
        language=build_language_id(cfg),
        chat=build_chat_model(cfg),
        nsfw=_media_model(cfg, build_nsfw, LazyImageClassifier, cfg.nsfw.backend),
        ocr=_media_model(cfg, build_ocr, LazyOCR, cfg.ocr.backend),
        transcriber=_media_model(cfg, build_transcriber, LazyTranscriber,
                                 cfg.transcriber.backend),
    )
    if heads:
        models.heads = HeadsService(settings.heads_path, models.embedder)
    return models


def _text_model(cfg: InferenceConfig, build: Any, name: str, *, lazy: bool) -> TextClassifier:
    return LazyTextClassifier(lambda: build(cfg), name) if lazy else build(cfg)  # type: ignore[no-any-return]


def _media_model(cfg: InferenceConfig, build: Any, wrapper: type[LazyService],
                 backend: str) -> Any:
    """`wrapper` around `build(cfg)`, or None when the section switches the model off
    (the media pipeline reads None as "no such model": the item is unchecked)."""
    return None if backend == "none" else wrapper(lambda: build(cfg), backend)


class PipelineHydrator:
    """The media pipeline as the flows' MediaHydrator (its report -> MediaFacts). It owns
    the pipeline's lifecycle; the models it uses are started and stopped by the bundle."""

    name = MEDIA_PIPELINE

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline

    async def start(self) -> None:
        await self.pipeline.start()

    async def stop(self) -> None:
        await self.pipeline.stop()
        if self.pipeline.asr is not None:
            await self.pipeline.asr.stop()

    async def hydrate(self, post: Post) -> MediaFacts:
        report = await self.pipeline.hydrate(post)
        return MediaFacts(
            nsfw=tuple(report.nsfw), ocr_text=report.ocr_text, transcript=report.transcript,
            transcript_language=report.transcript_language, nsfw_model=report.nsfw_model,
            items=len(report.items), errors=tuple(report.errors),
            unchecked=report.unchecked,
        )


class LazyMediaHydrator(LazyService):
    """The media pipeline, built and started by the first post with media: a text-only
    engine never imports PyAV, PIL and the pipeline's modules (~5% of an engine's
    start-up CPU), and `grebe run`'s dispatcher, which builds the bundle only to learn
    its plans, no longer imports them either. A pipeline that cannot be built fails
    closed like a lazy model: ModelUnavailableError, a system fault, the post retried."""

    async def hydrate(self, post: Post) -> MediaFacts:
        hydrator: PipelineHydrator = await self.ready()
        return await hydrator.hydrate(post)


def build_media(config: GrebeConfig, models: FlowModels,
                peers: Peers | None = None) -> MediaHydrator | None:
    """The lazily built media pipeline. With `peers`, its near-duplicate index is built
    now (numpy only) and shared with the other engines, so entries they add arrive
    before this engine's first post with media."""
    index = None
    if peers is not None:
        from grebe.media.dedup import NearDuplicateIndex

        index = NearDuplicateIndex(config.media.dedup.max_entries)
        index.share_with(peers)

    def build() -> PipelineHydrator:
        from grebe.media.asr import ASRProcessor
        from grebe.media.pipeline import MediaPipeline

        media_config = config.media
        asr = ASRProcessor(media_config.asr, media_config.video,
                           transcriber=models.transcriber)
        return PipelineHydrator(
            MediaPipeline(media_config, nsfw=models.nsfw, ocr=models.ocr, asr=asr,
                          index=index))

    return LazyMediaHydrator(build, MEDIA_PIPELINE)
