"""`engine.task_timeout_s` is the limit of every task that does not set its own (it was
read by nothing: plans used the constant)."""

import asyncio
import math

from grebe.app.bundles import build_bundle
from grebe.config import load_config
from grebe.core.bundle import PlanBundle
from grebe.core.plan import Plan
from grebe.core.planmaster import PlanMaster
from grebe.core.task import TaskSpec
from grebe.types import Post, TaskPayload


async def _hang(ctx):
    await asyncio.sleep(3600)


def build(config):  # a plans factory, named in the config below
    return PlanBundle(plans=[
        Plan("uses_default", {"hang": _hang}, eligibility="e"),
        Plan("own_limit", {"hang": _hang}, eligibility="own", task_timeout_s=math.inf),
        Plan("own_task_limit", {"hang": TaskSpec(_hang, timeout_s=0.05)}, eligibility="t"),
    ])


def _payload(eligibility: str) -> TaskPayload:
    return TaskPayload(
        payload_id="s:0:0", post=Post(id="p", author_id="a", text="x"),
        eligibilities=frozenset({eligibility}),
    )


async def test_engine_task_timeout_is_the_default_limit_of_every_plan() -> None:
    config = load_config(
        engine={"task_timeout_s": 0.2},
        plans={"factory": "tests.app.test_task_timeout_config:build"},
    )
    bundle = build_bundle(config)
    uses_default, own_limit, _ = bundle.plans
    assert uses_default.task_timeout_s == 0.2
    assert own_limit.task_timeout_s == math.inf  # set by its plan: left alone
    master = PlanMaster(bundle.plans)
    result = await asyncio.wait_for(master.run(_payload("e")), 5)
    assert result.error == "uses_default/hang: TimeoutError: timed out after 0.2s"
    result = await asyncio.wait_for(master.run(_payload("t")), 5)
    assert result.error == "own_task_limit/hang: TimeoutError: timed out after 0.05s"
