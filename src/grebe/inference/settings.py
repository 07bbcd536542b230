"""The `inference:` section of the grebe config: which model backend serves each role,
and its knobs. `grebe.config.GrebeConfig.inference` is this model, so a bad key fails
`load_config` (naming `inference.<field>`) before anything starts; the builders in
`grebe.inference.factory` read the validated object. Kept apart from the factory so the
config imports no model code.

```yaml
inference:
  embedder:                    # or the shorthand `embedder: minilm`
    backend: minilm            # minilm (default) | openai | hash (test double)
    max_batch_size: 64         # micro-batcher: texts per model call (sorted by length,
                               # run per forward pass: 1 (integer model) or 8 (float):
                               # see minilm.default_run_batch_size, bench/embed.py)
    max_wait_ms: 6.0           # ... how long the first request waits for company (6:
                               # ~0.14 ms CPU a post less than 2 with two engines, p99
                               # ingest->annotation still ~0.1 s at half load)
    max_concurrent_batches: 1  # ... forward passes in flight
    base_url: null             # openai: e.g. http://127.0.0.1:8000/v1
    model: null                # openai: the served model name
    api_key_env: null          # openai: env var holding the key (never the key itself)
    dim: null                  # openai: vector size (probed at start when null)
  minilm:
    model_dir: null            # a dir with model.onnx + tokenizer.json (default: packaged)
    intra_op_threads: 1        # ONNX threads per forward pass (null: cores / concurrent
                               # batches); 2 cost 45% more CPU a tweet for a slower pass
    intra_op_spinning: false   # let idle ONNX threads busy-wait (costs CPU on shared cores)
    quantize: true             # run the dynamic-int8 model derived from model.onnx (2.3x
                               # less CPU; the trained heads expect it: see docs/quality.md)
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
                num_workers: 1, cpu_threads: 1}  # backend: whisper | openai | none
  # openai: {backend: openai, base_url: http://127.0.0.1:8000/v1, model: whisper-1,
  #          api_key_env: null, timeout_s: 60, max_attempts: 3, response_format: verbose_json}
  ocr: {backend: tesseract, languages: eng, timeout_s: 20}   # tesseract | none
  nsfw: {backend: open_nsfw}                     # open_nsfw | none
  spam_head: {path: null}                        # null: the packaged weights
```

The small text classifiers (alt-profanity-check, HateSonar) have no keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from pydantic import Field, field_validator, model_validator

from grebe.settings_base import Section

#: Chat requests wait this long by default: a small model on CPU writing a few hundred
#: tokens takes tens of seconds.
CHAT_TIMEOUT_S = 60.0


class _Remote(Protocol):
    base_url: str | None
    model: str | None


_R = TypeVar("_R", bound=_Remote)


def _needs_endpoint(section: _R, *, on: bool) -> _R:
    """An OpenAI-compatible backend with no endpoint would fail at its first request
    (or, for chat, silently stay off): refuse it at load instead."""
    if on and not (section.base_url and section.model):
        raise ValueError("backend openai needs base_url and model")
    return section


class EndpointConfig(Section):
    base_url: str
    model: str
    api_key_env: str | None = None
    timeout_s: float = Field(default=CHAT_TIMEOUT_S, gt=0)
    max_attempts: int = Field(default=3, ge=1)


class EmbedderConfig(Section):
    backend: Literal["minilm", "openai", "hash"] = "minilm"
    max_batch_size: int = Field(default=64, ge=1)
    # Two engines each collect half the posts: a longer wait makes fuller batches
    # (docs/benchmarks.md, "A longer batch wait").
    max_wait_ms: float = Field(default=6.0, ge=0)
    max_concurrent_batches: int = Field(default=1, ge=1)
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    timeout_s: float = Field(default=30.0, gt=0)
    dim: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _openai_complete(self) -> EmbedderConfig:
        return _needs_endpoint(self, on=self.backend == "openai")


class MiniLMConfig(Section):
    model_dir: Path | None = None
    # One: a tweet's pass is too small to split. Two threads (the old default, one per
    # core) cost 3.4-3.6 ms CPU a tweet against 2.3 and finished later (2.9-3.0 ms wall
    # against 2.3: docs/benchmarks.md, "Both cores"); engines use the other core.
    # None: cores / concurrent batches.
    intra_op_threads: int | None = Field(default=1, ge=1)
    # Off: busy-waiting threads burn CPU that engines sharing the cores need.
    intra_op_spinning: bool = False
    # On: integer arithmetic, 2.3x less CPU per text (grebe.inference.minilm_quant).
    quantize: bool = True


class ChatConfig(Section):
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

    @model_validator(mode="after")
    def _openai_complete(self) -> ChatConfig:
        return _needs_endpoint(self, on=self.enabled)


class TranscriberConfig(Section):
    backend: Literal["whisper", "openai", "none"] = "whisper"
    model_dir: Path | None = None
    language: str | None = None
    beam_size: int = Field(default=5, ge=1)
    num_workers: int = Field(default=1, ge=1)
    # CTranslate2 threads per worker; 0: the cores split between the workers. One: the
    # media stages (decode, NSFW, OCR) share the cores, and idle OpenMP threads spin
    # (698 -> 596 ms CPU per speech clip of the media bench; docs/media.md).
    cpu_threads: int = Field(default=1, ge=0)
    # openai: POST {base_url}/audio/transcriptions (multipart), the model by name
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    timeout_s: float = Field(default=CHAT_TIMEOUT_S, gt=0)
    max_attempts: int = Field(default=3, ge=1)
    response_format: Literal["verbose_json", "json"] = "verbose_json"

    @model_validator(mode="after")
    def _openai_complete(self) -> TranscriberConfig:
        return _needs_endpoint(self, on=self.backend == "openai")


class OCRConfig(Section):
    backend: Literal["tesseract", "none"] = "tesseract"
    languages: str = "eng"
    timeout_s: float = Field(default=20.0, gt=0)


class NSFWConfig(Section):
    backend: Literal["open_nsfw", "none"] = "open_nsfw"
    model_path: Path | None = None
    # ONNX Runtime intra-op threads. One: the media stages already run several images at
    # once, and ORT's default (a thread per core, spinning while it waits) cost 45 ms CPU
    # a frame against 27 ms with one thread (bench/media_profile.py, docs/media.md).
    intra_op_threads: int | None = Field(default=1, ge=1)


class SpamHeadConfig(Section):
    path: Path | None = None


#: Roles that may be given as just their backend's name (`ocr: none`).
BACKEND_SHORTHANDS = ("embedder", "chat", "transcriber", "ocr", "nsfw")


class InferenceConfig(Section):
    embedder: EmbedderConfig = EmbedderConfig()
    minilm: MiniLMConfig = MiniLMConfig()
    language_id: bool = True
    chat: ChatConfig = ChatConfig()
    transcriber: TranscriberConfig = TranscriberConfig()
    ocr: OCRConfig = OCRConfig()
    nsfw: NSFWConfig = NSFWConfig()
    spam_head: SpamHeadConfig = SpamHeadConfig()

    @field_validator(*BACKEND_SHORTHANDS, mode="before")
    @classmethod
    def _expand_shorthand(cls, value: Any) -> Any:
        """`embedder: openai` means `embedder: {backend: openai}`."""
        return {"backend": value} if isinstance(value, str) else value


def expand_shorthands(section: dict[str, Any]) -> dict[str, Any]:
    """The raw section with every `role: backend` shorthand written out as a mapping.
    The config applies this before environment overrides are merged in: they merge
    only into mappings, so `GREBE_INFERENCE__EMBEDDER__MAX_BATCH_SIZE=8` over
    `embedder: hash` would otherwise replace `hash` and silently bring back the default
    backend."""
    return {key: {"backend": value} if key in BACKEND_SHORTHANDS and isinstance(value, str)
            else value for key, value in section.items()}

