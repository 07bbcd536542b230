"""The hydration step on the embedded post table: what an id-only message becomes."""

import pytest

from grebe import constants as C
from grebe.core.plan import Plan
from grebe.core.planmaster import PlanMaster
from grebe.core.task import SKIP
from grebe.errors import HydrationUnavailableError
from grebe.hydration.base import RemembersRecorded
from grebe.hydration.cache import CachedLoader
from grebe.hydration.hydrator import HydratingMaster, Hydrator, Skip
from grebe.hydration.sqlite import SqlitePostTable
from grebe.types import NO_POST, Post, TaskPayload, TaskStatus, User, UserContext

ROOT = Post(id="root", author_id="ra", text="the root", created_at=1.0)
PARENT = Post(id="parent", author_id="pa", text="the parent", reply_to_post_id="root",
              conversation_id="root", created_at=2.0)
REPLY = Post(id="reply", author_id="a", text="a reply", reply_to_post_id="parent",
             conversation_id="root", created_at=3.0)
USERS = [User(id="a", follower_count=5), User(id="pa", follower_count=500),
         User(id="ra", follower_count=90_000)]


@pytest.fixture
async def table(tmp_path):
    table = SqlitePostTable(tmp_path / "posts.db")
    await table.start()
    await table.record([ROOT, PARENT, REPLY, Post(id="old", author_id="a", created_at=0.5)],
                       USERS)
    yield table
    await table.stop()


def _payload(post, **kwargs):
    return TaskPayload(payload_id="s:0:0", post=post, eligibilities=frozenset({"seen"}),
                       **kwargs)


async def test_an_id_only_message_gets_post_author_parent_root_and_recent(table):
    hydrator = Hydrator(CachedLoader(table, ttl_s=60, maxsize=100), table=table,
                        recent_posts=5)
    hydrated = await hydrator.hydrate(_payload(Post(id="reply")))
    assert not isinstance(hydrated, Skip)
    context = hydrated.context
    assert hydrated.post == REPLY and hydrated.user == USERS[0] == context.author
    assert context.parent == PARENT and context.root == ROOT
    assert (context.parent_followers, context.root_followers) == (500, 90_000)
    assert [p.id for p in context.recent_posts] == ["old"]  # the post itself left out


async def test_what_the_message_brings_wins_and_is_recorded(table):
    own_parent = Post(id="parent", author_id="pa", text="as sent")
    post = Post(id="new", author_id="n", text="fresh", reply_to_post_id="parent")
    hydrator = Hydrator(table, table=table, recent_posts=0)
    hydrated = await hydrator.hydrate(_payload(
        post, user=User(id="n"), context=UserContext(parent=own_parent)))
    assert not isinstance(hydrated, Skip)
    assert hydrated.context.parent == own_parent and hydrated.context.recent_posts == ()
    assert (await table.get_posts(["new"]))["new"] == post  # every stream fills the table
    assert "n" in await table.get_users(["n"])


async def test_a_cached_loader_remembers_what_was_recorded_without_a_lookup(table):
    cached = CachedLoader(table, ttl_s=60, maxsize=100)
    assert isinstance(cached, RemembersRecorded) and not isinstance(table, RemembersRecorded)
    hydrator = Hydrator(cached, table=table, recent_posts=0)
    post = Post(id="fresh", author_id="f", text="just sent")
    await hydrator.record(_payload(post, user=User(id="f")))
    await table.stop()  # a lookup would now fail: the answer must come from the cache
    assert (await cached.get_posts(["fresh"]))["fresh"] == post
    assert "f" in await cached.get_users(["f"])
    await table.start()


async def test_a_post_in_no_table_skips_with_not_found(table):
    hydrator = Hydrator(table, table=table)
    outcome = await hydrator.hydrate(_payload(Post(id="ghost")))
    assert outcome == Skip(f"{C.HYDRATION_NOT_FOUND}: post ghost")


async def test_a_reply_whose_parent_is_unknown_runs_without_it(table):
    hydrator = Hydrator(table, table=table)
    hydrated = await hydrator.hydrate(_payload(
        Post(id="r2", author_id="a", reply_to_post_id="gone")))
    assert not isinstance(hydrated, Skip) and hydrated.context.parent is None


async def test_lookup_down_is_a_system_fault(tmp_path):
    table = SqlitePostTable(tmp_path / "posts.db")  # never started: the lookup is down
    with pytest.raises(HydrationUnavailableError):
        await Hydrator(table, table=None).hydrate(_payload(Post(id="reply")))


async def _seen(ctx):
    ctx.output.reasons["parent"] = ctx.payload.context.parent.text
    return None


async def _never(ctx):
    return SKIP


async def test_master_skips_every_plan_with_the_reason_and_succeeds(table):
    plans = [Plan("seen", {"t": _seen}, {}, eligibility="seen"),
             Plan("other", {"t": _never}, {}, eligibility="elsewhere")]
    master = HydratingMaster(PlanMaster(plans), Hydrator(table, table=table))
    result = await master.run(_payload(Post(id="ghost")))
    assert result.success and result.plans == {"seen": TaskStatus.SKIPPED}
    assert result.reasons == {C.HYDRATION_REASON_KEY: f"{C.HYDRATION_NOT_FOUND}: post ghost"}
    result = await master.run(_payload(Post(id="reply")))
    assert result.success and result.reasons == {"parent": "the parent"}


async def test_user_only_payloads_skip_plans_that_need_a_post(table):
    plans = [Plan("seen", {"t": _seen}, {}, eligibility="seen")]
    for hydrator in (Hydrator(table, table=table), None):
        master = HydratingMaster(PlanMaster(plans), hydrator)
        result = await master.run(_payload(NO_POST, user=User(id="u-only", bio="b")))
        assert result.success and result.plans == {"seen": TaskStatus.SKIPPED}
        assert result.reasons == {C.HYDRATION_REASON_KEY: C.HYDRATION_NO_POST}
    assert (await table.get_users(["u-only"]))["u-only"].bio == "b"  # still recorded
