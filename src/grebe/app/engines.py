"""Engine processes for a GrebeConfig: the recipe they receive and the builder they run.

core's ProcessExecutor knows no config: it sends each engine a BundleRecipe (strings),
and the engine imports the recipe's builder by name. For `grebe run` that builder is
`engine_bundle` below, called with the config as JSON: it re-validates the config in the
engine process and builds the bundle there, so models and clients are created in the
process that uses them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pydantic_core
from pydantic import SecretBytes, SecretStr

from grebe.app.bundles import build_bundle
from grebe.app.settings import engine_settings
from grebe.config import GrebeConfig
from grebe.core.bundle import PlanBundle
from grebe.core.engine import ProcessExecutor
from grebe.core.settings import BundleRecipe

#: The builder engine processes import: `engine_bundle` of this module.
ENGINE_BUNDLE_BUILDER = f"{__name__}:engine_bundle"


def bundle_recipe(config: GrebeConfig) -> BundleRecipe:
    """The recipe of `config`'s bundle. Secrets travel revealed: `model_dump_json` would
    send `**********` for a Kafka password, and the engines' producers would log in with
    that (the recipe goes over the engines' private socket pair, never to a log)."""
    argument = pydantic_core.to_json(_revealed(config.model_dump())).decode()
    return BundleRecipe(builder=ENGINE_BUNDLE_BUILDER, argument=argument)


def _revealed(value: Any) -> Any:
    if isinstance(value, SecretStr | SecretBytes):
        return value.get_secret_value()
    if isinstance(value, dict):
        return {key: _revealed(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_revealed(item) for item in value]
    return value


def engine_bundle(config_json: str) -> PlanBundle:
    """Run in an engine process, first thing after its Configure frame: scrub secrets
    from its logs, then build the configured bundle from the config."""
    from grebe.security.scrub import install_log_scrubbing

    install_log_scrubbing()
    return build_bundle(GrebeConfig.model_validate_json(config_json))


def process_executor(
    config: GrebeConfig, *, processes: int | None = None,
    on_engine_death: Callable[[int, int | None], None] | None = None,
) -> ProcessExecutor:
    """A ProcessExecutor running `config`'s plans in `engine.processes` engines."""
    return ProcessExecutor(
        engine_settings(config.engine), bundle_recipe(config), processes=processes,
        on_engine_death=on_engine_death,
    )
