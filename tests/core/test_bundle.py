"""A bundle's master is built through the steps put in front of it (`wrap_master`):
selection and hydration share this one way of wrapping instead of each re-implementing it."""

from __future__ import annotations

from grebe.core.bundle import PlanBundle
from grebe.core.planmaster import PlanMaster
from grebe.types import Post, TaskPayload, TaskResult


class _Step(PlanMaster):
    """Records its name in front of whatever the inner master records."""

    def __init__(self, inner: PlanMaster, name: str, seen: list[str]) -> None:
        super().__init__(inner.plans, services=inner.services)
        self.inner, self.name, self.seen = inner, name, seen

    async def run(self, payload: TaskPayload) -> TaskResult:
        self.seen.append(self.name)
        return await self.inner.run(payload)


async def test_the_step_wrapped_last_runs_first_over_the_plain_master() -> None:
    seen: list[str] = []
    bundle = PlanBundle(plans=[], services="svc")
    bundle.wrap_master(lambda inner: _Step(inner, "selection", seen))
    bundle.wrap_master(lambda inner: _Step(inner, "hydration", seen))
    master = bundle.master()
    assert isinstance(master, _Step) and master.services == "svc"
    assert type(master.inner.inner) is PlanMaster  # the plain master at the bottom
    await master.run(TaskPayload(payload_id="p", post=Post(id="1", author_id="a")))
    assert seen == ["hydration", "selection"]
