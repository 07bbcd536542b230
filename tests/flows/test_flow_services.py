"""A flow with state of its own contributes it through its declaration
(`Flow(services=...)`): the registry builds it with the rest of `ctx.services` and the
flow's tasks read it, with no edit to the registry or to FlowServices."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Callable

import pytest

from grebe.core.planmaster import PlanMaster
from grebe.errors import ConfigError
from grebe.flows import catalog, ptos, registry, spam
from grebe.flows.coordination import CoordinationIndex
from grebe.flows.enforcement import EnforcementHistory
from grebe.flows.settings import FlowSettings
from grebe.stores.base import MemoryStore
from grebe.types import TaskStatus

from .conftest import fake_models, payload

#: A flow counting the posts it saw per author, in a counter it contributes itself.
COUNTING_FLOW = textwrap.dedent('''
    from collections import Counter

    from pydantic import Field

    from grebe.core.plan import Plan
    from grebe.core.task import TaskContext
    from grebe.flows.catalog import Flow
    from grebe.flows.settings import PlanSettings

    NAME = "{name}"
    SEEN = "{name}.seen"


    class CountingSettings(PlanSettings):
        start_at: int = Field(default=0, ge=0)


    async def count(ctx: TaskContext) -> int:
        seen = ctx.services.contribution(SEEN)
        seen[ctx.payload.post.author_id] += 1
        return seen[ctx.payload.post.author_id]


    def services(settings, store):
        start = settings.plan(NAME).start_at
        return {{SEEN: Counter({{"a1": start}}), "store_seen": store}}


    PLAN = Plan(NAME, {{"count": count}}, {{}}, eligibility=NAME)
    FLOW = Flow(plan=PLAN, settings=CountingSettings, order=1000, services=services)
''')


async def test_a_flow_modules_own_service_reaches_its_tasks(
        install_flow_module: Callable[[str, str], str]) -> None:
    name = f"counting_{uuid.uuid4().hex[:8]}"
    install_flow_module(name, COUNTING_FLOW.format(name=name))
    flow = catalog.by_name()[name]
    store = MemoryStore()
    settings = FlowSettings.from_section({name: {"start_at": 10}})
    services = registry.assemble(settings, models=fake_models(), store=store)
    assert services.contribution("store_seen") is store  # built from the store it is given
    master = PlanMaster([flow.plan], services=services)
    for i in range(2):
        result = await master.run(payload(f"post {i}", eligibilities=frozenset({flow.name}),
                                          post_id=f"p{i}"))
        assert result.plans[name] is TaskStatus.SUCCESS
    assert services.contribution(f"{name}.seen")["a1"] == 12  # 10 from its settings


def test_the_built_in_flows_contribute_their_state_through_their_declarations() -> None:
    settings = FlowSettings.from_section(
        {spam.NAME: {"coordination": {"max_entries": 7}}})  # read by spam's declaration
    services = registry.assemble(settings, models=fake_models(), store=MemoryStore())
    assert isinstance(services.contribution(ptos.ENFORCEMENT_SERVICE), EnforcementHistory)
    index = services.contribution(spam.COORDINATION_SERVICE)
    assert isinstance(index, CoordinationIndex) and len(index._prints) == 7
    assert services.contribution("nobody's") is None


def test_two_flows_contributing_one_key_fail_at_assembly(
        install_flow_module: Callable[[str, str], str]) -> None:
    clash = COUNTING_FLOW.replace('SEEN = "{name}.seen"', f'SEEN = "{ptos.ENFORCEMENT_SERVICE}"')
    name = f"clash_{uuid.uuid4().hex[:8]}"
    install_flow_module(name, clash.format(name=name))
    with pytest.raises(ConfigError, match="both contribute the service 'enforcement'"):
        registry.assemble(FlowSettings.from_section(None), models=fake_models(),
                          store=MemoryStore())


def test_coordination_indexes_of_two_engines_see_one_campaign() -> None:
    """Two engines' coordination indexes wired as the dispatcher wires them: accounts
    seen by either engine count towards one campaign in both."""
    from grebe.core.peers import Peers

    peers = [Peers(), Peers()]
    indexes = [CoordinationIndex(max_entries=50, window_s=60, max_distance=3)
               for _ in peers]
    for index, mine, other in ((indexes[0], peers[0], peers[1]),
                               (indexes[1], peers[1], peers[0])):
        index.share_with(mine)
        mine.attach(other.deliver)
    text = "Claim your FREE crypto airdrop today, limited spots http://t.co/{}"
    seen = [indexes[i % 2].observe(f"p{i}", f"acct{i}", text.format(i)).accounts
            for i in range(5)]
    assert seen == [1, 2, 3, 4, 5]
    retry = indexes[1].observe("p0", "acct0", text.format(0))  # a retry on the other one
    assert retry.accounts == 5
    assert indexes[0].observe("p5", "acct5", text.format(5)).accounts == 6
