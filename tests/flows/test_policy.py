"""Policy as versioned data: the packaged policy file sets thresholds and actions under
a policy_version that every annotation carries; config overrides change the version."""

from __future__ import annotations

from pathlib import Path

import pytest

from grebe.core.planmaster import PlanMaster
from grebe.errors import ConfigError
from grebe.flows import registry
from grebe.flows.policy import read_policy
from grebe.flows.settings import FlowSettings

from .conftest import fake_services, payload

PACKAGED_VERSION, PACKAGED = read_policy(None)


def test_packaged_policy_is_the_default() -> None:
    settings = FlowSettings.from_section({})
    assert settings.policy_version == PACKAGED_VERSION
    assert settings.plan("spam_comment").threshold == PACKAGED["spam_comment"]["threshold"]
    ladder = settings.plan("safety_ptos").policies["hate"]
    packaged = [(r["min_score"], r["action"]) for r in PACKAGED["safety_ptos"]["policies"]["hate"]]
    assert [(r.min_score, r.action) for r in ladder] == packaged
    assert [action for _, action in packaged] == ["remove", "label"]


def test_config_override_changes_the_version() -> None:
    changed = FlowSettings.from_section({"spam_comment": {"threshold": 0.9}})
    assert changed.plan("spam_comment").threshold == 0.9
    assert changed.policy_version.startswith(f"{PACKAGED_VERSION}+config.")
    other = FlowSettings.from_section({"spam_comment": {"threshold": 0.8}})
    assert other.policy_version != changed.policy_version
    plumbing = FlowSettings.from_section({"spam_comment": {"max_qps": 5}})
    assert plumbing.policy_version == PACKAGED_VERSION  # not a policy key
    named = FlowSettings.from_section({"policy_version": "tns-7",
                                       "spam_comment": {"threshold": 0.9}})
    assert named.policy_version == "tns-7"


def test_policy_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("policy_version: strict-2\npost_safety: {hate_threshold: 0.3}\n")
    settings = FlowSettings.from_section({"policy_file": str(path)})
    assert settings.policy_version == "strict-2"
    assert settings.plan("post_safety").hate_threshold == 0.3
    assert settings.plan("spam_comment").threshold == 0.7  # the class default


@pytest.mark.parametrize(("body", "needle"), [
    ("spam_comment: {threshold: 0.5}\n", "needs a top-level 'policy_version'"),
    ("policy_version: x\nspam_comment: {max_qps: 3}\n", "spam_comment.max_qps is not a policy"),
    ("policy_version: x\nspam_comment: 3\n", "must be mappings"),
    ("policy_version: x\npost_safety: {hate_threshold: 7}\n", "plans.post_safety.hate_threshold"),
])
def test_bad_policy_file_is_a_config_error(tmp_path: Path, body: str, needle: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.").replace("(", r"\(")):
        FlowSettings.from_section({"policy_file": str(path)})


def test_missing_policy_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read policy file"):
        FlowSettings.from_section({"policy_file": str(tmp_path / "nope.yaml")})


async def test_every_annotation_carries_the_policy_version() -> None:
    services = fake_services({"policy_version": "tns-7"})
    await PlanMaster(registry.PLANS, services=services).run_plans(payload("hello there"))
    annotations = await services.store.get("p1")
    assert len(annotations) >= 5
    assert {a.policy_version for a in annotations} == {"tns-7"}
