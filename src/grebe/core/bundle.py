"""Plan bundles: what an engine runs, built from configuration by a named factory.

`plans.factory` in the configuration names a function "module:function" (default
"grebe.flows.basic:build_bundle") taking the GrebeConfig and returning a PlanBundle.
Every engine process imports and calls it after it starts, so clients (stores,
producers, models) are built in the process that uses them and never at import time.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from grebe import constants as C
from grebe.errors import ConfigError

if TYPE_CHECKING:
    from grebe.config import GrebeConfig
    from grebe.core.plan import Plan
    from grebe.core.planmaster import PlanMaster


class Lifecycle(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclass
class PlanBundle:
    """Plans plus the services their tasks use (`ctx.services`), and the components to
    start before the first payload and stop after the last, in that order and reversed."""

    plans: Sequence[Plan]
    services: Any = None
    components: Sequence[Lifecycle] = field(default_factory=list)
    # Builds the PlanMaster that runs the plans (tracing swaps in one that opens a span
    # per post); None: the plain PlanMaster.
    master_factory: Callable[..., PlanMaster] | None = None
    _started: list[Lifecycle] = field(default_factory=list, init=False, repr=False)

    def master(self) -> PlanMaster:
        from grebe.core.planmaster import PlanMaster

        factory = self.master_factory or PlanMaster
        return factory(self.plans, services=self.services)

    async def start(self) -> None:
        for component in self.components:
            await component.start()
            self._started.append(component)

    async def stop(self) -> None:
        """Stop what was started, newest first; every component gets its stop call."""
        errors: list[BaseException] = []
        while self._started:
            component = self._started.pop()
            try:
                await component.stop()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


BundleFactory = Callable[["GrebeConfig"], PlanBundle]


def factory_name(config: GrebeConfig) -> str:
    name = config.plans.get("factory", C.DEFAULT_PLANS_FACTORY)
    if not isinstance(name, str):
        raise ConfigError(f"plans.factory must be a 'module:function' string, got {name!r}")
    return name


def load_factory(name: str) -> BundleFactory:
    """Import "module:function". Raises ConfigError naming what was not found."""
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"plans.factory {name!r} must look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"plans.factory {name!r}: cannot import {module_name}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"plans.factory {name!r}: {module_name} has no function {attr!r}")
    return factory  # type: ignore[no-any-return]


def build_bundle(config: GrebeConfig) -> PlanBundle:
    """Build the configured bundle; plans that use the default task time limit get
    `engine.task_timeout_s`, so the setting applies to every flow without each factory
    passing it on."""
    bundle = load_factory(factory_name(config))(config)
    if not isinstance(bundle, PlanBundle):
        raise ConfigError(
            f"plans.factory {factory_name(config)!r} returned {type(bundle).__name__}, "
            "not a PlanBundle"
        )
    for plan in bundle.plans:
        plan.apply_default_timeout(config.engine.task_timeout_s)
    if config.tracing.enabled:  # after the timeouts: traced plans copy them
        from grebe.tracing import instrument

        instrument(bundle, config.tracing)
    from grebe.hydration.factory import attach
    from grebe.selection.master import attach as attach_selection

    attach_selection(bundle, config)  # each stream's selection, after hydration
    return attach(bundle, config)  # hydration by id, in front of whichever master
