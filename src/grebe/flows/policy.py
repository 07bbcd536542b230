"""The moderation policy as versioned data: thresholds and actions per plan, read from a
YAML file (the packaged grebe/data/policy.yaml, or `plans.policy_file`) under a
`policy_version` that every annotation carries.

Why a version: a trust-and-safety team changes thresholds; a stored verdict must say
which policy produced it, so it can be re-judged or audited. Config may still override
a policy key per plan (handy in tests and experiments); then, unless the config names
its own `plans.policy_version`, the version becomes "<file version>+config.<digest>",
so two deployments with different thresholds never claim the same version.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from grebe.errors import ConfigError

VERSION_KEY = "policy_version"
PACKAGED_POLICY = "policy.yaml"
DEFAULTS = "defaults"  # the policy file's section applied to every plan
CONFIG_SUFFIX = "+config."
#: Per-plan keys that are policy (a threshold or an action), not plumbing.
POLICY_KEYS = frozenset({
    "threshold", "nsfw_threshold", "hate_threshold", "offensive_threshold",
    "category_thresholds", "policies", "lexicons", "lexicon_hit_score",
    "toxicity_threshold", "spam_threshold", "head_thresholds", "subtypes",
    "media_subtype", "child_safety_check_floor", "enforcement_history",
})
#: Actions that take reach or the post away; never taken on one weak signal.
RESTRICTIVE_ACTIONS = frozenset({"remove", "limit_reach"})


def read_policy(path: Path | None) -> tuple[str, dict[str, dict[str, Any]]]:
    """(policy_version, {plan: {key: value}}) from `path` or the packaged policy."""
    try:
        if path is None:
            text = (resources.files("grebe") / "data" / PACKAGED_POLICY).read_text()
        else:
            text = Path(path).read_text()
        raw = yaml.safe_load(text) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read policy file {path}: {exc}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get(VERSION_KEY), str | int | float):
        raise ConfigError(f"policy file {path or PACKAGED_POLICY} needs a top-level "
                          f"{VERSION_KEY!r}")
    version = str(raw.pop(VERSION_KEY))
    bad = sorted(k for k, v in raw.items() if not isinstance(v, dict))
    if bad:
        raise ConfigError(f"policy file {path or PACKAGED_POLICY}: {bad} must be mappings")
    for plan, keys in raw.items():
        outside = sorted(set(keys) - POLICY_KEYS)
        if outside:
            raise ConfigError(f"policy file {path or PACKAGED_POLICY}: {plan}.{outside[0]} is "
                              f"not a policy key (those are {sorted(POLICY_KEYS)})")
    return version, raw


def overrides(section: dict[str, Any], plans: list[str]) -> dict[str, dict[str, Any]]:
    """The policy keys the `plans` config section sets, per plan (defaults included)."""
    found: dict[str, dict[str, Any]] = {}
    defaults = section.get("defaults") or {}
    for plan in plans:
        raw = {**defaults, **(section.get(plan) or {})}
        keys = {k: v for k, v in raw.items() if k in POLICY_KEYS}
        if keys:
            found[plan] = keys
    return found


def effective_version(file_version: str, explicit: str | None,
                      changed: dict[str, dict[str, Any]]) -> str:
    if explicit:
        return explicit
    if not changed:
        return file_version
    blob = json.dumps(changed, sort_keys=True, default=str).encode()
    return f"{file_version}{CONFIG_SUFFIX}{hashlib.blake2b(blob, digest_size=4).hexdigest()}"
