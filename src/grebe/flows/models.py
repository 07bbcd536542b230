"""The models and the media service flows use. Every backend is built by
grebe.inference.factory from the config's `inference` section (its docstring lists the
keys); what is flow-specific stays here: which models the plans hold, the label names
flows read, py3langid only when a plan filters by language, and the media pipeline as a
MediaHydrator. Built, not started: the bundle starts them in the engine process, loading
weights there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grebe.flows.services import MediaFacts
from grebe.inference.base import ChatModel, Embedder, TextClassifier
from grebe.inference.factory import InferenceBackends, parse_inference_config
from grebe.inference.text import HATE_SPEECH, OFFENSIVE_LANGUAGE
from grebe.types import Post

if TYPE_CHECKING:
    from grebe.config import GrebeConfig
    from grebe.flows.services import MediaHydrator, SpamScorer
    from grebe.flows.settings import FlowSettings

_HATE_KEYS = {"hate": HATE_SPEECH, "offensive": OFFENSIVE_LANGUAGE}


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

    def components(self) -> list[Any]:
        """What has a start()/stop() lifecycle, in start order."""
        parts = (self.embedder, self.offensive, self.hate, self.spam_head, self.language,
                 self.chat, self.nsfw, self.ocr, self.transcriber)
        return [p for p in parts if p is not None and hasattr(p, "start")]

    @classmethod
    def from_backends(cls, backends: InferenceBackends) -> FlowModels:
        return cls(
            embedder=backends.embedder, offensive=backends.offensive,
            hate=HateLabels(backends.hate), spam_head=backends.spam_head,
            language=backends.language, chat=backends.chat, nsfw=backends.nsfw,
            ocr=backends.ocr, transcriber=backends.transcriber,
        )


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
    """The `inference` section through the factory; py3langid only when a plan needs it."""
    inference = parse_inference_config(config.inference)
    if not any(settings.plan(name).languages for name in settings.enabled):
        inference = inference.model_copy(update={"language_id": False})
    return FlowModels.from_backends(InferenceBackends(inference))


class PipelineHydrator:
    """The media pipeline as the flows' MediaHydrator (its report -> MediaFacts). It owns
    the pipeline's lifecycle; the models it uses are started and stopped by the bundle."""

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


def build_media(config: GrebeConfig, models: FlowModels) -> MediaHydrator | None:
    from grebe.media.asr import ASRProcessor
    from grebe.media.config import MediaConfig
    from grebe.media.pipeline import MediaPipeline

    media_config = MediaConfig.from_section(config.media)
    asr = ASRProcessor(media_config.asr, media_config.video, transcriber=models.transcriber)
    pipeline = MediaPipeline(media_config, nsfw=models.nsfw, ocr=models.ocr, asr=asr)
    return PipelineHydrator(pipeline)
