"""The selection step: runs in the engine after hydration and before the plan master.

Why here and not in the dispatcher: the rules read the parent, the root and their
authors, which an id-only message only has once hydrated; and why not a first task of
each plan: a post its stream does not select must skip *every* plan with one reason,
whatever flows a deployment adds. A post not selected is a success (acked, committed,
never dead-lettered) whose result carries `reasons["selection"] = "not_selected:<rule>"`;
the dispatcher counts it in `grebe_dispatcher_not_selected_total{source, reason}`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from grebe import constants as C
from grebe.core.planmaster import PlanMaster
from grebe.selection.rules import why_not
from grebe.selection.settings import Selection
from grebe.types import TaskPayload, TaskResult, TaskStatus

if TYPE_CHECKING:
    from grebe.config import GrebeConfig, StreamConfig
    from grebe.core.bundle import PlanBundle

log = logging.getLogger(__name__)


def not_selected(rule: str) -> str:
    return f"{C.NOT_SELECTED_PREFIX}:{rule}"


class SelectingMaster(PlanMaster):
    """A PlanMaster that runs the inner one only on posts the payload's stream
    (`payload.source`) selects. Streams without rules cost one dict lookup."""

    __slots__ = ("inner", "selections")

    def __init__(self, inner: PlanMaster, selections: Mapping[str, Selection]) -> None:
        super().__init__(inner.plans, services=inner.services)
        self.inner = inner
        self.selections = dict(selections)

    async def run(self, payload: TaskPayload) -> TaskResult:
        selection = self.selections.get(payload.source)
        if selection is not None and (rule := why_not(selection, payload)) is not None:
            return self.skipped(payload, not_selected(rule))
        return await self.inner.run(payload)

    def skipped(self, payload: TaskPayload, reason: str) -> TaskResult:
        now = time.time()
        log.debug("payload %s: not selected by stream %s (%s)",
                  payload.payload_id, payload.source, reason)
        return TaskResult(
            payload_id=payload.payload_id, post_id=payload.post.id, success=True,
            plans={plan.name: TaskStatus.SKIPPED for plan in self.eligible(payload)},
            reasons={C.SELECTION_REASON_KEY: reason}, started_at=now, finished_at=now,
        )


def selections(streams: Sequence[StreamConfig]) -> dict[str, Selection]:
    """The streams that have rules, by name."""
    return {stream.name: stream.selection for stream in streams
            if not stream.selection.selects_everything}


def attach(bundle: PlanBundle, config: GrebeConfig) -> PlanBundle:
    """Put the selection step in front of the bundle's master (in place); nothing when
    no stream has rules. Attach it before hydration, so hydration runs first."""
    rules = selections(config.streams)
    if not rules:
        return bundle
    bundle.wrap_master(lambda inner: SelectingMaster(inner, rules))
    return bundle
