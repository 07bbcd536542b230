"""The `plans:` config section as one typed model, built from the declared flows.

`GrebeConfig.plans` is validated against it at config load, so a bad key of any flow
fails `grebe run` before anything starts, naming `plans.<plan>.<field>`; the flows' own
settings models (each flow module's `FLOW.settings`) are its fields, so a new flow's
settings are checked without an edit here. The section stays a plain mapping in the
config: `FlowSettings.from_section` layers the policy file, `plans.defaults` and each
plan's keys when the bundle is built (the layering needs the raw keys).

Under another `plans.factory` (the built-in `basic` plans, a deployment's own module)
keys that are not the flows' belong to that factory and pass through; the flows' own
keys are still checked (they configure `grebe serve`'s /v1/analyze whatever the factory).

This module imports grebe.flows.settings only when called: grebe.config imports it.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, create_model, model_validator

from grebe import constants as C

if TYPE_CHECKING:
    from grebe.flows.catalog import Flow

FACTORY_KEY = "factory"
ENABLED_KEY = "enabled"
DEFAULTS_KEY = "defaults"
#: Keys of the section read by the engine, not by the flows' settings.
_ENGINE_KEYS = frozenset({FACTORY_KEY})


def plans_section_model() -> type[BaseModel]:
    """The pydantic model of the `plans:` section for the flows declared now."""
    from grebe.flows import catalog

    return _section_model(catalog.flows())


@cache
def _section_model(flows: tuple[Flow, ...]) -> type[BaseModel]:
    from grebe.flows.settings import FlowSettings, PlanSettings

    section_keys: dict[str, Any] = {
        name: (field.annotation, field) for name, field in FlowSettings.model_fields.items()
        if name != "per_plan"  # filled from the plan keys, never configured itself
    }
    plan_keys: dict[str, Any] = {flow.name: (flow.settings | None, None) for flow in flows}
    names = sorted(plan_keys)

    def only_flow_keys_for_the_flows(section: BaseModel) -> BaseModel:
        factory = getattr(section, FACTORY_KEY) or C.DEFAULT_PLANS_FACTORY
        if factory != C.FLOWS_PLANS_FACTORY:
            return section
        if unknown := sorted(section.model_extra or {}):
            raise ValueError(f"unknown keys {unknown}; plans are {names}")
        if bad := sorted(set(getattr(section, ENABLED_KEY)) - set(names)):
            raise ValueError(f"{ENABLED_KEY} names unknown plans {bad}; plans are {names}")
        return section

    return create_model(  # type: ignore[call-overload,no-any-return]
        "PlansSection",
        __config__=ConfigDict(extra="allow"),
        __validators__={"flow_keys": model_validator(mode="after")(
            only_flow_keys_for_the_flows)},
        **{FACTORY_KEY: (str | None, None), DEFAULTS_KEY: (PlanSettings | None, None)},
        **section_keys,
        **plan_keys,
    )


def checked_plans(raw: dict[str, Any]) -> dict[str, Any]:
    """`raw` unchanged once it validates against the section model (pydantic's error,
    located under `plans.`, otherwise). A section naming only the factory has nothing
    to check, and is not checked: that keeps the flows unimported by a config that does
    not use them."""
    if set(raw) <= _ENGINE_KEYS:
        return raw
    plans_section_model().model_validate(raw)
    return raw
