"""Building backends from the `inference` config section (nothing is started)."""

from __future__ import annotations

import numpy as np
import pytest

from grebe.config import load_config
from grebe.errors import ConfigError, InferenceError
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
from grebe.inference.fakes import HashEmbedder
from grebe.inference.minilm import MiniLMEmbedder
from grebe.inference.openai_compat import FallbackChatModel, OpenAIChatModel, OpenAIEmbedder
from grebe.inference.settings import InferenceConfig
from grebe.inference.text import HateSonarClassifier, LanguageIdClassifier, ProfanityClassifier


def test_defaults_are_local_models_and_no_chat() -> None:
    config = load_config().inference
    assert isinstance(build_embedder(config), MiniLMEmbedder)
    assert build_chat_model(config) is None


def test_shorthand_and_openai_backends() -> None:
    config = InferenceConfig.model_validate(
        {
            "embedder": {"backend": "openai", "base_url": "http://x/v1", "model": "e5", "dim": 8},
            "chat": {
                "backend": "openai",
                "base_url": "http://a/v1",
                "model": "big",
                "fallbacks": [{"base_url": "http://b/v1", "model": "small"}],
            },
            "transcriber": "none",
            "ocr": "none",
            "nsfw": "none",
        }
    )
    assert isinstance(build_embedder(config), OpenAIEmbedder)
    chat = build_chat_model(config)
    assert isinstance(chat, FallbackChatModel) and chat.name == "fallback(big,small)"
    # the flows' shape: no backend key, base_url switches chat on
    single = InferenceConfig.model_validate(
        {
            "chat": {"base_url": "http://a/v1", "model": "m", "response_format": "json_object"},
            "minilm": {"intra_op_threads": 1},
            "spam_head": {"path": None},
            "language_id": False,
        }
    )
    chat_model = build_chat_model(single)
    assert isinstance(chat_model, OpenAIChatModel)
    assert chat_model.response_format == "json_object" and chat_model.max_tokens == 300
    assert chat_model.client.timeout_s == 60.0  # CHAT_TIMEOUT_S: slow CPU models
    assert build_chat_model(InferenceConfig.model_validate({"chat": {"backend": "none"}})) is None


def test_builders_build_every_backend_without_loading(tmp_path) -> None:
    missing = tmp_path / "no-such-head.npz"
    config = InferenceConfig.model_validate(
        {"embedder": "hash", "transcriber": "none", "ocr": "none", "nsfw": "none",
         "language_id": False, "spam_head": {"path": str(missing)}}
    )
    assert isinstance(build_embedder(config), HashEmbedder)
    assert isinstance(build_offensive_classifier(config), ProfanityClassifier)
    assert isinstance(build_hate_classifier(config), HateSonarClassifier)
    assert build_language_id(config) is None and build_chat_model(config) is None
    assert build_transcriber(config) is None and build_ocr(config) is None
    assert build_nsfw(config) is None
    spam_head = build_spam_head(config)
    assert spam_head.head is None  # the weights are read in start(), not here
    with pytest.raises(InferenceError, match="before start"):
        spam_head.score(np.zeros((1, 384), dtype=np.float32))


@pytest.mark.slow
async def test_built_backends_start_and_stop() -> None:
    config = InferenceConfig.model_validate(
        {"embedder": "hash", "transcriber": "none", "ocr": "none", "nsfw": "none"})
    language = build_language_id(config)
    assert isinstance(language, LanguageIdClassifier)
    embedder, spam_head, hate = (build_embedder(config), build_spam_head(config),
                                 build_hate_classifier(config))
    for backend in (embedder, spam_head, hate):
        await backend.start()  # type: ignore[attr-defined]
    try:
        vectors = await embedder.embed(["win a free prize now"])
        assert vectors.shape == (1, 384)
        assert spam_head.name.startswith("spam-head:")
        assert spam_head.score(vectors).shape == (1,)
        (scores,) = await hate.classify(["have a nice day"])
        assert set(scores) == {"hate_speech", "offensive_language", "neither"}
    finally:
        for backend in (embedder, spam_head, hate):
            await backend.stop()  # type: ignore[attr-defined]
    assert hate.batcher is None  # type: ignore[attr-defined]  # stopped


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"embedder": "bert"}, "inference.embedder.backend"),
        ({"embedder": {"backend": "minilm", "max_batch_size": 0}}, "max_batch_size"),
        ({"chat": {"backend": "openai"}}, "needs base_url and model"),
        ({"chat": {"model": "smollm2"}}, "needs base_url and model"),  # not silently off
        ({"unknown": 1}, "inference.unknown"),
    ],
)
def test_invalid_sections_are_config_errors(section: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(inference=section)


def test_the_whisper_transcriber_runs_one_thread_unless_told() -> None:
    """In-process Whisper (the flows' media ASR) shares the cores with the media stages:
    one CTranslate2 thread by default; 0 splits the cores between its workers as before."""
    from grebe.inference.whisper import WhisperTranscriber

    default = build_transcriber(InferenceConfig())
    assert isinstance(default, WhisperTranscriber) and default.cpu_threads == 1
    split = build_transcriber(InferenceConfig.model_validate({"transcriber": {"cpu_threads": 0}}))
    assert isinstance(split, WhisperTranscriber) and split.cpu_threads >= 1
