"""Build model backends from the `inference` section of the configuration (its typed
model and every key: grebe.inference.settings; flows build their models through these
builders too).

The small text classifiers (alt-profanity-check, HateSonar) have no keys; they are built
here too so that every backend comes from one place.

Nothing is loaded here: builders return unstarted services; callers `start()` them
(or use `InferenceBackends.start()`), so building from config is cheap and testable.
The flows call the builders one by one (grebe.flows.models), wrapping those a post may
never need in grebe.inference.lazy so they are built and loaded on first use only.
"""

from __future__ import annotations

from typing import Any, cast

from grebe.inference.base import (
    OCR,
    ChatModel,
    Embedder,
    ImageClassifier,
    Service,
    TextClassifier,
    Transcriber,
)
from grebe.inference.settings import EndpointConfig, InferenceConfig
from grebe.inference.spam_head import SpamHeadService


def build_embedder(config: InferenceConfig) -> Embedder:
    cfg = config.embedder
    if cfg.backend == "hash":
        from grebe.inference.fakes import HashEmbedder

        return HashEmbedder(cfg.dim or 384)
    if cfg.backend == "openai":
        from grebe.inference.openai_compat import OpenAICompatClient, OpenAIEmbedder

        client = OpenAICompatClient(
            cfg.base_url or "",
            cfg.model or "",
            api_key_env=cfg.api_key_env,
            timeout_s=cfg.timeout_s,
        )
        return OpenAIEmbedder(
            client,
            dim=cfg.dim,
            max_batch_size=cfg.max_batch_size,
            max_wait_ms=cfg.max_wait_ms,
            max_concurrent_batches=cfg.max_concurrent_batches,
        )
    from grebe.inference.minilm import MiniLMEmbedder

    return MiniLMEmbedder(
        config.minilm.model_dir,
        max_batch_size=cfg.max_batch_size,
        max_wait_ms=cfg.max_wait_ms,
        max_concurrent_batches=cfg.max_concurrent_batches,
        intra_op_threads=config.minilm.intra_op_threads,
        intra_op_spinning=config.minilm.intra_op_spinning,
    )


def build_chat_model(config: InferenceConfig) -> ChatModel | None:
    cfg = config.chat
    if not cfg.enabled:
        return None
    from grebe.inference.openai_compat import (
        FallbackChatModel,
        OpenAIChatModel,
        OpenAICompatClient,
    )

    endpoints = [
        EndpointConfig(
            base_url=cfg.base_url or "",
            model=cfg.model or "",
            api_key_env=cfg.api_key_env,
            timeout_s=cfg.timeout_s,
            max_attempts=cfg.max_attempts,
        ),
        *cfg.fallbacks,
    ]
    models = [
        OpenAIChatModel(
            OpenAICompatClient(
                e.base_url,
                e.model,
                api_key_env=e.api_key_env,
                timeout_s=e.timeout_s,
                max_attempts=e.max_attempts,
            ),
            max_tokens=cfg.max_tokens,
            response_format=cfg.response_format,
        )
        for e in endpoints
    ]
    return models[0] if len(models) == 1 else FallbackChatModel(models)


def build_transcriber(config: InferenceConfig) -> Transcriber | None:
    cfg = config.transcriber
    if cfg.backend == "none":
        return None
    if cfg.backend == "openai":
        from grebe.inference.openai_audio import OpenAITranscriber
        from grebe.inference.openai_compat import OpenAICompatClient

        client = OpenAICompatClient(cfg.base_url or "", cfg.model or "",
                                    api_key_env=cfg.api_key_env, timeout_s=cfg.timeout_s,
                                    max_attempts=cfg.max_attempts)
        return OpenAITranscriber(client, language=cfg.language,
                                 response_format=cfg.response_format)
    from grebe.inference.whisper import WhisperTranscriber

    return WhisperTranscriber(
        cfg.model_dir,
        language=cfg.language,
        beam_size=cfg.beam_size,
        num_workers=cfg.num_workers,
    )


def build_ocr(config: InferenceConfig) -> OCR | None:
    cfg = config.ocr
    if cfg.backend == "none":
        return None
    from grebe.inference.ocr import TesseractOCR

    return TesseractOCR(languages=cfg.languages, timeout_s=cfg.timeout_s)


def build_nsfw(config: InferenceConfig) -> ImageClassifier | None:
    cfg = config.nsfw
    if cfg.backend == "none":
        return None
    from grebe.inference.nsfw import OpenNSFWClassifier

    return OpenNSFWClassifier(cfg.model_path)


def build_language_id(config: InferenceConfig) -> TextClassifier | None:
    if not config.language_id:
        return None
    from grebe.inference.text import LanguageIdClassifier

    return LanguageIdClassifier()


def build_offensive_classifier(config: InferenceConfig) -> TextClassifier:
    from grebe.inference.text import ProfanityClassifier

    return ProfanityClassifier()


def build_hate_classifier(config: InferenceConfig) -> TextClassifier:
    from grebe.inference.text import HateSonarClassifier

    return HateSonarClassifier()


def build_spam_head(config: InferenceConfig) -> SpamHeadService:
    return SpamHeadService(config.spam_head.path)


class InferenceBackends:
    """Every backend, started and stopped together. Optional ones are None when
    configured off; flows check for None and skip what needs them."""

    def __init__(self, config: InferenceConfig) -> None:
        self.config = config
        self.embedder = build_embedder(config)
        self.offensive = build_offensive_classifier(config)
        self.hate = build_hate_classifier(config)
        self.language = build_language_id(config)
        self.spam_head = build_spam_head(config)
        self.chat = build_chat_model(config)
        self.transcriber = build_transcriber(config)
        self.ocr = build_ocr(config)
        self.nsfw = build_nsfw(config)
        self._started: list[Service] = []

    def backends(self) -> list[Any]:
        """The configured backends (None left out), in start order."""
        parts = (self.embedder, self.offensive, self.hate, self.language, self.spam_head,
                 self.chat, self.transcriber, self.ocr, self.nsfw)
        return [p for p in parts if p is not None]

    async def start(self) -> None:
        for backend in self.backends():
            if backend in self._started:
                continue
            service = cast(Service, backend)  # every backend has the Service lifecycle
            await service.start()
            self._started.append(service)

    async def stop(self) -> None:
        while self._started:
            await self._started.pop().stop()
