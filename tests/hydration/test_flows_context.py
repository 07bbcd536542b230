"""Flows that need context read the hydrated values: reply ranking gets its parent."""

from tests.flows.conftest import fake_services

from grebe.core.planmaster import PlanMaster
from grebe.flows import registry
from grebe.hydration.hydrator import HydratingMaster, Hydrator
from grebe.hydration.sqlite import SqlitePostTable
from grebe.types import Post, TaskPayload, TaskStatus


async def test_reply_ranking_scores_a_reply_whose_parent_came_by_id(tmp_path):
    table = SqlitePostTable(tmp_path / "posts.db")
    await table.start()
    try:
        await table.record([Post(id="parent", author_id="a0",
                                 text="What is the best coffee for espresso at home?")], [])
        reply = TaskPayload(
            payload_id="t:0:0", eligibilities=frozenset({"reply_ranking"}),
            post=Post(id="r1", author_id="a1", reply_to_post_id="parent",
                      text="A medium roast espresso blend, ground fine, works best at home."),
        )
        master = PlanMaster(registry.PLANS, services=fake_services())
        bare = await master.run(reply)
        assert bare.plans == {"reply_ranking": TaskStatus.SKIPPED}  # no parent: no ranking
        hydrated = await HydratingMaster(master, Hydrator(table, table=table)).run(reply)
        assert hydrated.plans == {"reply_ranking": TaskStatus.SUCCESS}
        assert any(label.startswith("reply_score:") for label in hydrated.labels)
    finally:
        await table.stop()
