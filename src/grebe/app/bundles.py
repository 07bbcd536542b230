"""Plan bundles from configuration: the configured factory, plus what every bundle gets.

`plans.factory` names a function "module:function" (default
"grebe.flows.basic:build_bundle") taking the GrebeConfig and returning a PlanBundle.
`build_bundle` calls it and adds what the deployment configures for every flow: the
default task time limit, tracing, each stream's selection, hydration by id. Engine
processes call it through grebe.app.engines after they start."""

from __future__ import annotations

from collections.abc import Callable

from grebe import constants as C
from grebe.blas import use_one_thread
from grebe.config import GrebeConfig
from grebe.core.bundle import PlanBundle, import_callable
from grebe.errors import ConfigError

BundleFactory = Callable[[GrebeConfig], PlanBundle]


def factory_name(config: GrebeConfig) -> str:
    name = config.plans.get("factory", C.DEFAULT_PLANS_FACTORY)
    if not isinstance(name, str):
        raise ConfigError(f"plans.factory must be a 'module:function' string, got {name!r}")
    return name


def load_factory(name: str) -> BundleFactory:
    """Import "module:function". Raises ConfigError naming what was not found."""
    return import_callable(name, "plans.factory")


def factory_bundle(config: GrebeConfig) -> PlanBundle:
    """The configured factory's bundle as it returns it (not started, nothing added)."""
    bundle = load_factory(factory_name(config))(config)
    if not isinstance(bundle, PlanBundle):
        raise ConfigError(
            f"plans.factory {factory_name(config)!r} returned {type(bundle).__name__}, "
            "not a PlanBundle"
        )
    return bundle


def build_bundle(config: GrebeConfig) -> PlanBundle:
    """Build the configured bundle; plans that use the default task time limit get
    `engine.task_timeout_s`, so the setting applies to every flow without each factory
    passing it on, raised to what the factory says a plan needs (`min_task_timeout_s`).
    The process that runs the plans gets one BLAS thread (grebe.blas)."""
    bundle = factory_bundle(config)
    use_one_thread()  # after the models' libraries loaded: many small products, no threads
    for plan in bundle.plans:
        floor = bundle.min_task_timeout_s.get(plan.name, 0.0)
        plan.apply_default_timeout(max(config.engine.task_timeout_s, floor))
    if config.tracing.enabled:  # after the timeouts: traced plans copy them
        from grebe.tracing import instrument

        instrument(bundle, config.tracing)
    from grebe.hydration.factory import attach
    from grebe.selection.master import attach as attach_selection

    attach_selection(bundle, config)  # each stream's selection, after hydration
    return attach(bundle, config)  # hydration by id, in front of whichever master
