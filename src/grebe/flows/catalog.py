"""Every flow, collected from the modules that declare one: a new flow is one new module.

A flow module declares itself with one object,

    FLOW = Flow(plan=PLAN, settings=SpamSettings, order=10)

(or `FLOWS = (Flow(...), Flow(...))` for a module that serves several plans; a flow with
state of its own adds `services=lambda settings, store: {key: ...}`), and this
catalog finds it: every module of the `grebe.flows` package is scanned (pkgutil), and a
third-party package adds its flow modules to the `grebe.flows` entry-point group
(`[project.entry-points."grebe.flows"] mine = "my_pkg.my_flow"`). Nothing else is edited:
the plans the registry runs, the settings models of the `plans:` config section and the
eligibilities a stream may name are all read from here.

Why a scan and not a hand-kept list: the list had to be kept in sync in four files (the
eligibility enum, the settings table, the registry's plans, the LLM schemas), and a flow
missing from one of them ran without its settings or not at all.

The plan's name is the settings key (`plans.<name>`) and its eligibility the name streams
use; `order` fixes where its labels merge among the plans of one payload (ties by name),
so the order does not depend on module names or import order.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from types import ModuleType
from typing import TYPE_CHECKING, Any

from grebe.errors import ConfigError

if TYPE_CHECKING:
    from grebe.core.plan import Plan
    from grebe.core.task import TaskFn
    from grebe.flows.settings import FlowSettings, PlanSettings
    from grebe.stores.base import AnnotationStore

#: What a flow contributes to `ctx.services`: given the `plans:` settings and the annotation
#: store, its own named state (PTOS's enforcement history, spam's coordination index).
FlowServiceFactory = Callable[["FlowSettings", "AnnotationStore"], Mapping[str, Any]]

log = logging.getLogger(__name__)

#: The entry-point group third-party flow modules register in.
ENTRY_POINT_GROUP = "grebe.flows"
#: The module attributes a flow module declares itself with (one Flow, or a sequence).
FLOW_ATTRIBUTE = "FLOW"
FLOWS_ATTRIBUTE = "FLOWS"


@dataclass(frozen=True, slots=True, eq=False)  # by identity: `prompts` is a dict
class Flow:
    """One flow: its plan, the settings model of `plans.<plan name>`, and its merge order."""

    plan: Plan
    settings: type[PlanSettings]
    order: int  # labels of a payload's plans merge in ascending order (ties: by name)
    # The flow's LLM prompt templates by name (grebe.flows.llm's format), for a flow that
    # ships its prompts in its module; the packaged and `plans.prompts_dir` files win.
    prompts: Mapping[str, str] = field(default_factory=dict)
    # The flow's own services (state its tasks share across posts), built once per engine
    # with the rest of `ctx.services` and read by its tasks as
    # `ctx.services.contribution(key)`: a flow with state of its own needs no registry edit.
    services: FlowServiceFactory | None = None
    # What the flow's tasks await for every text-only post they judge, declared so that
    # the post's plans compute it once before they start (grebe.flows.prelude): one of
    # its own tasks whose only effect is filling the payload memo (a model pass, the
    # heads, the language), never one that records state (author memory, an index).
    prelude: TaskFn | None = None

    @property
    def name(self) -> str:
        """The plan's name: its key in `plans:` and in `plans.enabled`."""
        return self.plan.name

    @property
    def eligibility(self) -> str:
        """The name a stream lists to have its posts run through this flow."""
        return self.plan.eligibility


def declared(module: ModuleType) -> list[Flow]:
    """The flows `module` declares (none if it declares none)."""
    found: list[Flow] = []
    one = getattr(module, FLOW_ATTRIBUTE, None)
    many = getattr(module, FLOWS_ATTRIBUTE, None)
    for candidate in ([one] if one is not None else []) + list(many or ()):
        if not isinstance(candidate, Flow):
            raise ConfigError(f"{module.__name__}.{FLOW_ATTRIBUTE}/{FLOWS_ATTRIBUTE} holds "
                              f"{type(candidate).__name__}, not a grebe.flows.catalog.Flow")
        found.append(candidate)
    return found


def _package_modules() -> Iterable[ModuleType]:
    package = importlib.import_module(__package__ or "grebe.flows")
    for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
        yield importlib.import_module(info.name)


def _entry_point_modules() -> Iterable[ModuleType]:
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            yield importlib.import_module(entry.value.split(":")[0])
        except ImportError as exc:
            raise ConfigError(f"flow module {entry.value!r} (entry point {entry.name!r} of "
                              f"{ENTRY_POINT_GROUP}) cannot be imported: {exc}") from exc


def check(flows: Iterable[Flow]) -> tuple[Flow, ...]:
    """The flows in merge order; ConfigError if two share a plan name or an eligibility
    (a stream's eligibility must pick exactly one plan)."""
    ordered = tuple(sorted(flows, key=lambda f: (f.order, f.name)))
    for attribute in ("name", "eligibility"):
        values = [getattr(f, attribute) for f in ordered]
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            raise ConfigError(f"two flows declare the same {attribute}: {', '.join(repeated)}")
    return ordered


@cache
def flows() -> tuple[Flow, ...]:
    """Every declared flow, in merge order. Collected once per process (`refresh()`
    forgets it, for tests that add a flow module)."""
    seen: set[int] = set()
    found: list[Flow] = []
    for module in (*_package_modules(), *_entry_point_modules()):
        if id(module) in seen:
            continue
        seen.add(id(module))
        found.extend(declared(module))
    return check(found)


def refresh() -> None:
    """Collect again on the next call (a flow module was added or removed)."""
    flows.cache_clear()


def by_name() -> dict[str, Flow]:
    """Plan name -> its flow, in merge order."""
    return {flow.name: flow for flow in flows()}


def prompt_template(name: str) -> str | None:
    """The template `name` some flow declares in its module, if any."""
    return next((f.prompts[name] for f in flows() if name in f.prompts), None)


def eligibilities() -> frozenset[str]:
    """Every eligibility some flow serves: the names a stream may use for the flows."""
    return frozenset(flow.eligibility for flow in flows())
