from __future__ import annotations

import pytest

from grebe.errors import ConfigError
from grebe.flows.settings import FlowSettings, ReplySettings, SpamSettings


def test_defaults_cover_every_plan() -> None:
    settings = FlowSettings.from_section({})
    assert isinstance(settings.plan("spam_comment"), SpamSettings)
    assert isinstance(settings.plan("reply_ranking"), ReplySettings)
    assert settings.plan("reply_ranking").post_types == ["reply"]
    assert len(settings.enabled) == 10
    assert settings.backend("spam_comment") == "local"


def test_defaults_section_then_plan_overrides() -> None:
    settings = FlowSettings.from_section({
        "factory": "grebe.flows.registry:build_bundle",
        "classifier": "llm",
        "defaults": {"languages": ["en"], "max_qps": 50},
        "spam_comment": {"threshold": 0.7, "max_qps": 5, "classifier": "local"},
    })
    spam = settings.plan("spam_comment")
    assert spam.threshold == 0.7 and spam.max_qps == 5 and spam.languages == ["en"]
    assert settings.plan("post_safety").max_qps == 50
    assert settings.backend("spam_comment") == "local"
    assert settings.backend("post_safety") == "llm"


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"spam_comment": {"threshold": 2}}, "plans.spam_comment.threshold"),
        ({"spam_comment": {"tresh": 0.5}}, "plans.spam_comment.tresh"),
        ({"no_such_plan": {}}, "unknown keys ['no_such_plan']"),
        ({"enabled": ["spam_comment", "nope"]}, "unknown plans ['nope']"),
        ({"classifier": "gpt"}, "plans.classifier"),
    ],
)
def test_bad_config_is_a_clear_error(raw, needle) -> None:
    with pytest.raises(ConfigError) as info:
        FlowSettings.from_section(raw)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("plans", "needle"),
    [
        ({"spam_comment": {"threshold": 2}}, "plans.spam_comment.threshold"),
        ({"post_safety": {"nsfw_treshold": 0.5}}, "plans.post_safety.nsfw_treshold"),
        ({"defaults": {"max_qps": -1}}, "plans.defaults.max_qps"),
        ({"heads": "maybe"}, "plans.heads"),
        ({"factory": "grebe.flows.registry:build_bundle", "no_such_plan": {}},
         "unknown keys ['no_such_plan']"),
        ({"factory": "grebe.flows.registry:build_bundle", "enabled": ["nope"]},
         "unknown plans ['nope']"),
    ],
)
def test_a_bad_plans_key_fails_at_config_load(plans, needle) -> None:
    from grebe.config import load_config

    with pytest.raises(ConfigError) as info:
        load_config(plans=plans)
    assert needle in str(info.value)


def test_another_factorys_own_keys_pass_config_load() -> None:
    from grebe.config import load_config

    config = load_config(plans={"factory": "my_plans:build", "marker": "x",
                                "spam_comment": {"threshold": 0.5}})
    assert config.plans["marker"] == "x"  # the section stays the raw mapping
