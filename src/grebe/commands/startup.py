"""What `grebe run` and `grebe serve` say first: the config file and what each stream runs.

With no config file they run the packaged defaults (sixteen streams, the real flows); a
new user must see that, and an operator reading a log must see which file a process read
and which plans each stream feeds, before the first post is processed. One INFO line per
stream: its name, broker and topic, and its eligibilities with the plans that serve them.
The packaged defaults are found here too: the demo and `grebe eval` start from them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from grebe import constants as C
from grebe.config import GrebeConfig
from grebe.errors import GrebeError

log = logging.getLogger(__name__)

ORIGIN_OPTION = "--config"
ORIGIN_ENV = f"${C.CONFIG_ENV_VAR}"
ORIGIN_PACKAGED = "no config file: the packaged defaults"
NO_PLAN = "(no plan)"


@dataclass(frozen=True)
class ConfigFile:
    """The file a pipeline command reads, and why that one."""

    path: Path
    origin: str

    @property
    def packaged(self) -> bool:
        return self.origin == ORIGIN_PACKAGED


def pipeline_config_file(path: Path | None) -> ConfigFile:
    """`--config`, else $GREBE_CONFIG, else the packaged default.yaml: the pipeline
    commands never run the programmatic no-op default, so ingesting posts and running
    annotates them."""
    if path is not None:
        return ConfigFile(path, ORIGIN_OPTION)
    if env := os.environ.get(C.CONFIG_ENV_VAR):
        return ConfigFile(Path(env), ORIGIN_ENV)
    return ConfigFile(packaged_config_path(), ORIGIN_PACKAGED)


def packaged_config_path() -> Path:
    """src/grebe/data/default.yaml: the sixteen seed streams and the real flows."""
    return Path(str(resources.files("grebe") / C.PACKAGED_DEFAULT_CONFIG))


def packaged_config_raw() -> dict[str, Any]:
    """The packaged default.yaml as plain data, a fresh copy each call: the demo and
    `grebe eval` start from it and change it."""
    raw: dict[str, Any] = yaml.safe_load(packaged_config_path().read_text())
    return raw


def stream_lines(config: GrebeConfig, plans: Iterable[tuple[str, str]]) -> list[str]:
    """One line per stream; `plans` is (plan name, eligibility) of each plan served."""
    by_eligibility: dict[str, list[str]] = {}
    for name, eligibility in plans:
        by_eligibility.setdefault(eligibility, []).append(name)
    lines = []
    for stream in config.streams:
        served = [n for e in stream.eligibilities for n in by_eligibility.get(e, [])]
        lines.append(
            f"stream {stream.name}: {stream.broker} topic {stream.topic}, eligibilities "
            f"{', '.join(stream.eligibilities)} → plans {', '.join(served) or NO_PLAN}"
        )
    return lines


def served_plans(config: GrebeConfig) -> list[tuple[str, str]]:
    """(name, eligibility) of each plan the configured factory builds. The bundle is built,
    not started: no model is loaded and no file opened."""
    from grebe.app.bundles import factory_name, load_factory

    bundle = load_factory(factory_name(config))(config)
    return [(plan.name, plan.eligibility) for plan in bundle.plans]


def log_start(config: GrebeConfig, source: ConfigFile) -> None:
    """Log the config file, then one line per stream. A factory that cannot be built is
    left to the runtime, which refuses to start and says why."""
    log.info("config: %s (%s)", source.path, source.origin)
    try:
        plans = served_plans(config)
    except GrebeError:
        return
    for line in stream_lines(config, plans):
        log.info("%s", line)
