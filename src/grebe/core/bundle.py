"""Plan bundles: what an engine runs: plans, the services their tasks use, and the
components to start and stop around them.

Which bundle runs is wiring, not runtime: grebe.app.bundles builds it from the
configured factory (`plans.factory`, "module:function"), in every engine process after
it starts, so clients (stores, producers, models) are built in the process that uses
them and never at import time.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from grebe.core.peers import Peers
from grebe.errors import ConfigError

if TYPE_CHECKING:
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
    # The least default task limit a plan can live with, by plan name: a plan whose tasks
    # wait on a remote LLM needs the client's whole budget (timeout x attempts), or
    # `engine.task_timeout_s` cancels a slow but healthy call and the post dead-letters.
    min_task_timeout_s: dict[str, float] = field(default_factory=dict)
    # Channels to the other engine processes, for state that spans authors (core.peers).
    peers: Peers = field(default_factory=Peers)
    _started: list[Lifecycle] = field(default_factory=list, init=False, repr=False)

    def master(self) -> PlanMaster:
        from grebe.core.planmaster import PlanMaster

        factory = self.master_factory or PlanMaster
        return factory(self.plans, services=self.services)

    def wrap_master(self, step: Callable[[PlanMaster], PlanMaster]) -> None:
        """Put `step` (a master that takes the inner master: selection, hydration) in
        front of the master this bundle builds; the step wrapped last runs first."""
        inner = self.master_factory

        def master(plans: Sequence[Plan], services: Any = None) -> PlanMaster:
            from grebe.core.planmaster import PlanMaster

            return step((inner or PlanMaster)(plans, services=services))

        self.master_factory = master

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


def import_callable(name: str, what: str) -> Callable[..., Any]:
    """Import "package.module:function". Raises ConfigError naming `what` (the setting
    it came from) and what was not found."""
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{what} {name!r} must look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what} {name!r}: cannot import {module_name}: {exc}") from exc
    function = getattr(module, attr, None)
    if not callable(function):
        raise ConfigError(f"{what} {name!r}: {module_name} has no function {attr!r}")
    return function  # type: ignore[no-any-return]
