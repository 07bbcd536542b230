"""flows build their models through grebe.inference.factory (nothing is started)."""

from __future__ import annotations

import pytest

from grebe.config import load_config
from grebe.errors import ConfigError
from grebe.flows.models import HateLabels, build_models
from grebe.flows.settings import FlowSettings
from grebe.inference.fakes import KeywordClassifier
from grebe.inference.minilm import MODEL_NAME
from grebe.inference.openai_compat import OpenAIChatModel
from grebe.inference.spam_head import SpamHeadService
from grebe.inference.text import HateSonarClassifier, LanguageIdClassifier


def test_inference_section_reaches_the_flow_models(tmp_path) -> None:
    config = load_config(inference={
        "embedder": "hash",
        "chat": {"base_url": "http://127.0.0.1:9/v1", "model": "smollm2",
                 "response_format": "json_object", "max_tokens": 120},
        "spam_head": {"path": str(tmp_path / "head.npz")},
        "ocr": "none",
    })
    models = build_models(config, FlowSettings.from_section({"heads": False}))
    assert models.embedder.name.startswith("hash")
    assert isinstance(models.chat, OpenAIChatModel)
    assert models.chat.name == "smollm2" and models.chat.max_tokens == 120
    assert models.chat.response_format == "json_object"
    assert models.chat.client.timeout_s == 60.0
    assert isinstance(models.spam_head, SpamHeadService)
    assert str(models.spam_head.path) == str(tmp_path / "head.npz")  # read at start()
    assert models.ocr is None and models.nsfw is not None and models.transcriber is not None
    assert isinstance(models.hate, HateLabels)
    assert isinstance(models.hate.inner, HateSonarClassifier)  # no heads: loaded at start


def test_language_id_is_always_built_unless_switched_off() -> None:
    # Every annotation records the post's language and text models abstain outside
    # theirs, so the detector no longer depends on a plan filtering by language.
    config = load_config()
    assert isinstance(build_models(config, FlowSettings.from_section({})).language,
                      LanguageIdClassifier)
    off = load_config(inference={"language_id": False})
    assert build_models(off, FlowSettings.from_section({})).language is None


def test_bad_inference_section_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"inference\.chat"):
        build_models(load_config(inference={"chat": {"model": "no-url"}}),
                     FlowSettings.from_section({}))


async def test_hate_labels_are_renamed_for_flows() -> None:
    inner = KeywordClassifier(["vermin"], label="hate_speech")
    (row,) = await HateLabels(inner).classify(["they are vermin"])
    assert row == {"hate": 1.0, "offensive": 0.0}


async def test_trained_heads_are_built_and_checked_against_the_embedder() -> None:
    from grebe.errors import InferenceError
    from grebe.flows.models import HeadsService
    from grebe.inference.fakes import HashEmbedder

    config = load_config()
    models = build_models(config, FlowSettings.from_section({}))
    assert isinstance(models.heads, HeadsService)
    (together, *_) = models.components()
    assert models.heads in together.parts
    assert build_models(config, FlowSettings.from_section({"heads": False})).heads is None
    wrong = HeadsService(None, HashEmbedder())  # heads trained on MiniLM, not this space
    with pytest.raises(InferenceError, match=f"were trained on {MODEL_NAME}"):
        await wrong.start()
    with pytest.raises(InferenceError, match="before start"):
        wrong.predict(None)  # type: ignore[arg-type]


def test_components_are_the_same_group_on_every_call() -> None:
    # Benches and tests start models.components() and later stop models.components():
    # a fresh group the second time would stop nothing.
    models = build_models(load_config(), FlowSettings.from_section({}))
    first, second = models.components(), models.components()
    assert first[0] is second[0] and first == second


async def test_heads_are_one_read_only_view_while_started() -> None:
    # The judge reads `heads` ~90 times a post: one view made at start, not a copy each.
    from types import SimpleNamespace

    from grebe.errors import InferenceError
    from grebe.flows.models import HeadsService

    config = load_config()
    embedder = build_models(config, FlowSettings.from_section({})).embedder
    service = HeadsService(None, SimpleNamespace(name=embedder.name))  # type: ignore[arg-type]
    with pytest.raises(InferenceError, match="before start"):
        _ = service.heads
    await service.start()
    view = service.heads
    assert view is service.heads and "spam" in view
    with pytest.raises(TypeError):
        view["spam"] = None  # type: ignore[index]
    await service.stop()
    with pytest.raises(InferenceError, match="before start"):
        _ = service.heads
