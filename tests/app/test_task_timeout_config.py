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


def build_with_floor(config):  # a factory that says one plan needs a longer limit
    return PlanBundle(
        plans=[Plan("slow_remote", {"hang": _hang}, eligibility="r"),
               Plan("local", {"hang": _hang}, eligibility="l")],
        min_task_timeout_s={"slow_remote": 0.5},
    )


def test_a_plan_that_needs_longer_gets_its_floor_and_no_other_plan_does() -> None:
    config = load_config(
        engine={"task_timeout_s": 0.2},
        plans={"factory": "tests.app.test_task_timeout_config:build_with_floor"},
    )
    slow_remote, local = build_bundle(config).plans
    assert slow_remote.task_timeout_s == 0.5
    assert local.task_timeout_s == 0.2


def test_llm_classified_flows_get_the_chat_clients_whole_budget(tmp_path) -> None:
    """plans.classifier: llm with the defaults (60 s a request, 3 attempts): the engine's
    30 s limit cancelled a CPU model's slow but healthy answer and the post dead-lettered."""
    from grebe.flows.registry import FACTORY, chat_budget_s

    config = load_config(
        data_dir=str(tmp_path),
        plans={"factory": FACTORY, "classifier": "llm"},
        inference={"chat": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}},
    )
    budget = chat_budget_s(config.inference.chat)
    assert budget >= 3 * 60.0 > config.engine.task_timeout_s
    bundle = build_bundle(config)
    by_name = {p.name: p for p in bundle.plans}
    assert by_name["spam_comment"].task_timeout_s == budget
    local = load_config(data_dir=str(tmp_path / "local"), plans={"factory": FACTORY})
    assert {p.task_timeout_s for p in build_bundle(local).plans} == {
        local.engine.task_timeout_s}
