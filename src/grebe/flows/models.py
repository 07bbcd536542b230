"""The models and the media service flows use, built from the config's `inference` and
`media` sections (constructed, not started: the bundle starts them in the engine
process, loading weights there).

Keys read from `inference` (all optional):
    minilm: {model_dir, intra_op_threads}    # text embedder (default: packaged int8 MiniLM)
    language_id: true                         # py3langid for the plans' language filter
    spam_head: {path}                         # default: the packaged trained weights
    chat:                                     # the LLM path (plans.classifier: llm)
      base_url: http://127.0.0.1:8000/v1
      model: smollm2
      api_key_env: OPENAI_API_KEY             # name of the variable holding the key
      response_format: json_schema            # json_object for llama-cpp-python's server
      timeout_s: 60
      max_tokens: 300
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from grebe.errors import ConfigError
from grebe.flows.services import MediaFacts
from grebe.inference.base import ChatModel, Embedder, TextClassifier
from grebe.types import Post

if TYPE_CHECKING:
    from grebe.config import GrebeConfig
    from grebe.flows.services import MediaHydrator, SpamScorer
    from grebe.flows.settings import FlowSettings

_HATE_KEYS = {"hate": "hate_speech", "offensive": "offensive_language"}


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


class TrainedSpamHead:
    """The shipped logistic-regression spam head (grebe.inference.spam_head) as the
    flows' SpamScorer; its weights are read in start()."""

    def __init__(self, path: str | None = None) -> None:
        self._path = path
        self._head: Any = None

    @property
    def name(self) -> str:
        return "spam-head" if self._head is None else f"spam-head:{self._head.version}"

    async def start(self) -> None:
        from grebe.inference.spam_head import SpamHead

        if self._head is None:
            self._head = SpamHead.load(self._path)

    async def stop(self) -> None:
        return None

    def score(self, embeddings: np.ndarray) -> np.ndarray:
        return self._head.score(embeddings)  # type: ignore[no-any-return]


def _chat(section: dict[str, Any] | None) -> ChatModel | None:
    if not section:
        return None
    from grebe.inference.openai_compat import OpenAIChatModel, OpenAICompatClient

    try:
        client = OpenAICompatClient(
            section["base_url"], section["model"], api_key_env=section.get("api_key_env"),
            timeout_s=float(section.get("timeout_s", 60.0)),
        )
        return OpenAIChatModel(client, max_tokens=section.get("max_tokens", 300),
                               response_format=section.get("response_format", "json_schema"))
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"inference.chat needs base_url and model: {exc}") from exc


def build_models(config: GrebeConfig, settings: FlowSettings) -> FlowModels:
    from grebe.inference.minilm import MiniLMEmbedder
    from grebe.inference.nsfw import OpenNSFWClassifier
    from grebe.inference.ocr import TesseractOCR
    from grebe.inference.text import (
        HateSonarClassifier,
        LanguageIdClassifier,
        ProfanityClassifier,
    )
    from grebe.inference.whisper import WhisperTranscriber

    section = config.inference or {}
    minilm = section.get("minilm") or {}
    wants_language = section.get("language_id", True) and any(
        settings.plan(name).languages for name in settings.enabled)
    return FlowModels(
        embedder=MiniLMEmbedder(model_dir=minilm.get("model_dir"),
                                intra_op_threads=minilm.get("intra_op_threads")),
        offensive=ProfanityClassifier(),
        hate=HateLabels(HateSonarClassifier()),
        spam_head=TrainedSpamHead((section.get("spam_head") or {}).get("path")),
        language=LanguageIdClassifier() if wants_language else None,
        chat=_chat(section.get("chat")),
        nsfw=OpenNSFWClassifier(),
        ocr=TesseractOCR(),
        transcriber=WhisperTranscriber(),
    )


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
        )


def build_media(config: GrebeConfig, models: FlowModels) -> MediaHydrator | None:
    from grebe.media.asr import ASRProcessor
    from grebe.media.config import MediaConfig
    from grebe.media.pipeline import MediaPipeline

    media_config = MediaConfig.from_section(config.media)
    asr = ASRProcessor(media_config.asr, media_config.video, transcriber=models.transcriber)
    pipeline = MediaPipeline(media_config, nsfw=models.nsfw, ocr=models.ocr, asr=asr)
    return PipelineHydrator(pipeline)
