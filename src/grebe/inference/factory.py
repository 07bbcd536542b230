"""Build model backends from the `inference` section of the configuration (its typed
model and every key: grebe.inference.settings; flows build their models through these
builders too).

The small text classifiers (alt-profanity-check, HateSonar) have no keys; they are built
here too so that every backend comes from one place.

Nothing is loaded here: builders return unstarted services; callers `start()` them
so building from config is cheap and testable. The one container of built models is
grebe.flows.models.FlowModels (built once per bundle by `build_models`, which calls these
builders and wraps those a post may never need in grebe.inference.lazy so they are built
and loaded on first use only); the media scan builds its models here too.
"""

from __future__ import annotations

from grebe.inference.base import (
    OCR,
    ChatModel,
    Embedder,
    ImageClassifier,
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
        quantize=config.minilm.quantize,
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
        cpu_threads=cfg.cpu_threads or None,
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

    return OpenNSFWClassifier(cfg.model_path, intra_op_threads=cfg.intra_op_threads)


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
