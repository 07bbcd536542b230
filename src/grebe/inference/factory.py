"""Build model backends from the `inference` section of the configuration: the one
parser of that section (flows build their models through it too).

```yaml
inference:
  embedder:                    # or the shorthand `embedder: minilm`
    backend: minilm            # minilm (default) | openai | hash (test double)
    max_batch_size: 64         # micro-batcher: texts per model call (sorted by length,
                               # run 8 per forward pass: see bench/embed.py)
    max_wait_ms: 2.0           # ... how long the first request waits for company
    max_concurrent_batches: 1  # ... forward passes in flight
    base_url: null             # openai: e.g. http://127.0.0.1:8000/v1
    model: null                # openai: the served model name
    api_key_env: null          # openai: env var holding the key (never the key itself)
    dim: null                  # openai: vector size (probed at start when null)
  minilm:
    model_dir: null            # a dir with model.onnx + tokenizer.json (default: packaged)
    intra_op_threads: null     # ONNX threads (default: cores / concurrent batches)
    intra_op_spinning: false   # let idle ONNX threads busy-wait (costs CPU on shared cores)
  language_id: true            # load py3langid (flows skip it when no plan needs it)
  chat:                        # structured-output LLM (flows' plans.classifier: llm), off
    backend: openai            # none | openai; default: openai when base_url (or model)
    base_url: ...              #   is set, e.g. http://127.0.0.1:8000/v1
    model: ...                 #   e.g. smollm2
    api_key_env: OPENAI_API_KEY    # name of the variable holding the key
    timeout_s: 60              # per request: a CPU model writing 300 tokens is slow
    max_attempts: 3
    max_tokens: 300
    response_format: json_schema   # json_schema | json_object (llama-cpp-python) | none
    fallbacks:                 # tried in order when the primary fails or is open
      - {base_url: http://127.0.0.1:11434/v1, model: llama3.2}   # same keys as chat's
  transcriber: {backend: whisper, model_dir: null, language: null, beam_size: 5,
                num_workers: 1}                  # backend: whisper | openai | none
  # openai: {backend: openai, base_url: http://127.0.0.1:8000/v1, model: whisper-1,
  #          api_key_env: null, timeout_s: 60, max_attempts: 3, response_format: verbose_json}
  ocr: {backend: tesseract, languages: eng, timeout_s: 20}   # tesseract | none
  nsfw: {backend: open_nsfw}                     # open_nsfw | none
  spam_head: {path: null}                        # null: the packaged weights
```

The small text classifiers (alt-profanity-check, HateSonar) have no keys; they are built
here too so that every backend comes from one place.

Nothing is loaded here: builders return unstarted services; callers `start()` them
so building from config is cheap and testable. The one container of built models is
grebe.flows.models.FlowModels (built once per bundle by `build_models`, which calls these
builders and wraps those a post may never need in grebe.inference.lazy so they are built
and loaded on first use only); the media scan builds its models here too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from grebe.config import validation_problems
from grebe.errors import ConfigError
from grebe.inference.base import (
    OCR,
    ChatModel,
    Embedder,
    ImageClassifier,
    TextClassifier,
    Transcriber,
)
from grebe.inference.spam_head import SpamHeadService

#: Chat requests wait this long by default: a small model on CPU writing a few hundred
#: tokens takes tens of seconds.
CHAT_TIMEOUT_S = 60.0


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EndpointConfig(_Section):
    base_url: str
    model: str
    api_key_env: str | None = None
    timeout_s: float = Field(default=CHAT_TIMEOUT_S, gt=0)
    max_attempts: int = Field(default=3, ge=1)


class EmbedderConfig(_Section):
    backend: Literal["minilm", "openai", "hash"] = "minilm"
    max_batch_size: int = Field(default=64, ge=1)
    max_wait_ms: float = Field(default=2.0, ge=0)
    max_concurrent_batches: int = Field(default=1, ge=1)
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    timeout_s: float = Field(default=30.0, gt=0)
    dim: int | None = Field(default=None, ge=1)


class MiniLMConfig(_Section):
    model_dir: Path | None = None
    intra_op_threads: int | None = Field(default=None, ge=1)
    # Off: busy-waiting threads burn CPU that engines sharing the cores need.
    intra_op_spinning: bool = False


class ChatConfig(_Section):
    backend: Literal["none", "openai"] | None = None  # None: openai iff base_url/model set
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    timeout_s: float = Field(default=CHAT_TIMEOUT_S, gt=0)
    max_attempts: int = Field(default=3, ge=1)
    max_tokens: int | None = Field(default=300, ge=1)
    response_format: Literal["json_schema", "json_object", "none"] = "json_schema"
    fallbacks: list[EndpointConfig] = Field(default_factory=list)

    @property
    def enabled(self) -> bool:
        """On when asked for, or when an endpoint is half-given (then validation says
        what is missing instead of the LLM path silently staying off)."""
        return self.backend == "openai" or (
            self.backend is None and bool(self.base_url or self.model)
        )


class TranscriberConfig(_Section):
    backend: Literal["whisper", "openai", "none"] = "whisper"
    model_dir: Path | None = None
    language: str | None = None
    beam_size: int = Field(default=5, ge=1)
    num_workers: int = Field(default=1, ge=1)
    # openai: POST {base_url}/audio/transcriptions (multipart), the model by name
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    timeout_s: float = Field(default=CHAT_TIMEOUT_S, gt=0)
    max_attempts: int = Field(default=3, ge=1)
    response_format: Literal["verbose_json", "json"] = "verbose_json"


class OCRConfig(_Section):
    backend: Literal["tesseract", "none"] = "tesseract"
    languages: str = "eng"
    timeout_s: float = Field(default=20.0, gt=0)


class NSFWConfig(_Section):
    backend: Literal["open_nsfw", "none"] = "open_nsfw"
    model_path: Path | None = None


class SpamHeadConfig(_Section):
    path: Path | None = None


class InferenceConfig(_Section):
    embedder: EmbedderConfig = EmbedderConfig()
    minilm: MiniLMConfig = MiniLMConfig()
    language_id: bool = True
    chat: ChatConfig = ChatConfig()
    transcriber: TranscriberConfig = TranscriberConfig()
    ocr: OCRConfig = OCRConfig()
    nsfw: NSFWConfig = NSFWConfig()
    spam_head: SpamHeadConfig = SpamHeadConfig()

    @field_validator("embedder", "chat", "transcriber", "ocr", "nsfw", mode="before")
    @classmethod
    def _expand_shorthand(cls, value: Any) -> Any:
        """`embedder: openai` means `embedder: {backend: openai}`."""
        return {"backend": value} if isinstance(value, str) else value


def parse_inference_config(section: dict[str, Any] | None) -> InferenceConfig:
    """Validate the free-form `inference` section; ConfigError names each bad field."""
    try:
        config = InferenceConfig.model_validate(section or {})
    except ValidationError as exc:
        raise ConfigError(validation_problems(exc, "inference.")) from exc
    for where, cfg, on in (
        ("embedder", config.embedder, config.embedder.backend == "openai"),
        ("chat", config.chat, config.chat.enabled),
        ("transcriber", config.transcriber, config.transcriber.backend == "openai"),
    ):
        if on and not (cfg.base_url and cfg.model):
            raise ConfigError(f"inference.{where}: backend openai needs base_url and model")
    return config


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
