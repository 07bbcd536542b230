from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from grebe.core.plan import Plan, PlanResult
from grebe.core.planmaster import PlanMaster
from grebe.core.task import SKIP, TaskContext
from grebe.errors import PlanError
from grebe.types import Post, TaskPayload, TaskStatus

S, K, F = TaskStatus.SUCCESS, TaskStatus.SKIPPED, TaskStatus.FAILED


def payload(*eligibilities: str) -> TaskPayload:
    return TaskPayload(
        payload_id="pl", post=Post(id="post-1", author_id="u"),
        eligibilities=frozenset(eligibilities),
    )


def others() -> set[asyncio.Task[Any]]:
    return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]


async def noop(ctx: TaskContext) -> None:
    return None


def contributes(
    labels: list[str] = (),  # type: ignore[assignment]
    scores: dict[str, float] | None = None,
    reasons: dict[str, str] | None = None,
    embedding: list[float] | None = None,
    transcript: str | None = None,
    sleep: float | None = None,
) -> Callable[..., Any]:
    async def task(ctx: TaskContext) -> None:
        if sleep is not None:
            await asyncio.sleep(sleep)
        ctx.output.labels.extend(labels)
        ctx.output.scores.update(scores or {})
        ctx.output.reasons.update(reasons or {})
        if embedding is not None:
            ctx.output.embedding = embedding
        if transcript is not None:
            ctx.output.transcript = transcript

    return task


def test_duplicate_plan_names_are_rejected() -> None:
    with pytest.raises(PlanError, match="repeated: a"):
        PlanMaster(
            [Plan("a", {"t": noop}, eligibility="x"), Plan("a", {"t": noop}, eligibility="y")]
        )


def test_eligible_keeps_plan_order() -> None:
    plans = [Plan(name, {"t": noop}, eligibility=e)
             for name, e in [("p1", "x"), ("p2", "y"), ("p3", "x")]]
    master = PlanMaster(plans)
    assert [p.name for p in master.eligible(payload("x"))] == ["p1", "p3"]
    assert [p.name for p in master.eligible(payload("y", "x"))] == ["p1", "p2", "p3"]
    assert master.eligible(payload("z")) == []


async def test_no_eligible_plan_is_a_success_with_no_plans() -> None:
    master = PlanMaster([Plan("p", {"t": noop}, eligibility="x")])
    result = await master.run(payload("other"))
    assert result.success and result.plans == {} and result.error is None
    assert result.payload_id == "pl" and result.post_id == "post-1"


async def test_merge_rules() -> None:
    # The first plan is the slowest: merge order is plan order, not finishing order.
    first = Plan("first", {"t": contributes(
        ["a", "b"], {"s1": 0.1, "both": 1.0}, {"r": "first"}, transcript="hello", sleep=0.02)},
        eligibility="x")
    second = Plan("second", {"t": contributes(
        ["c"], {"s2": 0.2, "both": 2.0}, {"r": "second"}, embedding=[1.0, 2.0],
        transcript="ignored")}, eligibility="x")
    third = Plan("third", {"t": contributes(["d"], embedding=[9.0])}, eligibility="x")
    before = time.time()
    result = await PlanMaster([first, second, third]).run(payload("x"))
    assert result.success
    assert result.plans == {"first": S, "second": S, "third": S}
    assert list(result.plans) == ["first", "second", "third"]
    assert result.labels == ["a", "b", "c", "d"]
    assert result.scores == {"s1": 0.1, "both": 2.0, "s2": 0.2}
    assert result.reasons == {"r": "second"}
    assert result.embedding == [1.0, 2.0]
    assert result.transcript == "hello"
    assert before <= result.started_at <= result.finished_at <= time.time()
    assert result.finished_at - result.started_at >= 0.02


async def test_skipped_plans_are_a_success_and_failures_are_joined() -> None:
    async def boom(ctx: TaskContext) -> None:
        raise ValueError("model down")

    async def skip(ctx: TaskContext) -> object:
        return SKIP

    plans = [
        Plan("ok", {"t": noop}, eligibility="x"),
        Plan("skips", {"t": skip, "u": noop}, {"u": ["t"]}, eligibility="x"),
    ]
    result = await PlanMaster(plans).run(payload("x"))
    assert result.success and result.plans == {"ok": S, "skips": K}

    plans.append(Plan("fails", {"t": boom, "u": boom}, eligibility="x"))
    plans.append(Plan("fails_too", {"v": boom}, eligibility="x"))
    result = await PlanMaster(plans).run(payload("x"))
    assert not result.success
    assert result.plans == {"ok": S, "skips": K, "fails": F, "fails_too": F}
    assert result.error == (
        "fails/t: ValueError: model down; fails/u: ValueError: model down; "
        "fails_too/v: ValueError: model down"
    )


async def test_plans_run_concurrently() -> None:
    # Each plan waits for the other to have started: sequential execution would hang.
    started = {"a": asyncio.Event(), "b": asyncio.Event()}

    def waits_for(me: str, other: str) -> Callable[..., Any]:
        async def task(ctx: TaskContext) -> None:
            started[me].set()
            await started[other].wait()

        return task

    plans = [Plan(n, {"t": waits_for(n, o)}, eligibility="x", task_timeout_s=1)
             for n, o in [("a", "b"), ("b", "a")]]
    result = await PlanMaster(plans).run(payload("x"))
    assert result.success


async def test_plans_share_one_memo_per_payload() -> None:
    calls = 0

    async def embed() -> list[float]:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.001)
        return [0.5]

    async def task(ctx: TaskContext) -> None:
        ctx.output.embedding = await ctx.memo.get_or_compute("emb", embed)

    plans = [Plan(f"p{i}", {"t": task}, eligibility="x") for i in range(5)]
    master = PlanMaster(plans, services="svc")
    result = await master.run(payload("x"))
    assert result.success and result.embedding == [0.5] and calls == 1
    await master.run(payload("x"))
    assert calls == 2  # a new payload gets a new memo
    assert not others()


async def test_services_reach_the_tasks() -> None:
    seen: list[Any] = []

    async def task(ctx: TaskContext) -> None:
        seen.append(ctx.services)

    await PlanMaster([Plan("p", {"t": task}, eligibility="x")], services="svc").run(payload("x"))
    assert seen == ["svc"]


async def test_run_plans_returns_each_plans_result_in_order() -> None:
    plans = [Plan("slow", {"t": contributes(["s"], sleep=0.01)}, eligibility="x"),
             Plan("fast", {"t": contributes(["f"])}, eligibility="x"),
             Plan("other", {"t": noop}, eligibility="y")]
    results = await PlanMaster(plans).run_plans(payload("x"))
    assert [(r.plan, r.output.labels) for r in results] == [("slow", ["s"]), ("fast", ["f"])]


@pytest.mark.parametrize("suspends", [True, False])
@pytest.mark.parametrize("position", [0, 1, 2])
async def test_a_plan_that_crashes_is_failed_without_losing_the_others(
    suspends: bool, position: int
) -> None:
    class BrokenPlan(Plan):
        __slots__ = ()

        async def run(self, payload: TaskPayload, **kwargs: Any) -> PlanResult:
            if suspends:
                await asyncio.sleep(0)
            raise RuntimeError("executor bug")

    plans = [Plan("good", {"t": contributes(["ok"])}, eligibility="x"),
             Plan("good2", {"t": contributes(["ok2"], sleep=0.001)}, eligibility="x")]
    plans.insert(position, BrokenPlan("broken", {"t": noop}, eligibility="x"))
    result = await PlanMaster(plans).run(payload("x"))
    assert result.plans == {p.name: F if p.name == "broken" else S for p in plans}
    assert result.labels == ["ok", "ok2"]
    assert result.error == "broken: RuntimeError: executor bug"
    assert not others()


async def test_cancelling_the_master_leaves_nothing_running() -> None:
    cancelled: list[str] = []
    started = asyncio.Event()

    def hang(name: str) -> Callable[..., Any]:
        async def task(ctx: TaskContext) -> None:
            started.set()
            try:
                await ctx.memo.get_or_compute("k", lambda: asyncio.sleep(10))
            except asyncio.CancelledError:
                cancelled.append(name)
                raise

        return task

    plans = [Plan(f"p{i}", {"t": hang(f"p{i}")}, eligibility="x") for i in range(3)]
    runner = asyncio.create_task(PlanMaster(plans).run(payload("x")))
    await started.wait()
    await asyncio.sleep(0.001)
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner
    assert sorted(cancelled) == ["p0", "p1", "p2"]
    assert not others()  # plan tasks and the memo computation are all gone


async def test_memo_work_nobody_waits_for_is_cancelled_after_the_payload() -> None:
    async def impatient(ctx: TaskContext) -> None:
        await ctx.memo.get_or_compute("slow", lambda: asyncio.sleep(10))

    plans = [Plan(f"p{i}", {"t": impatient}, eligibility="x", task_timeout_s=0.01)
             for i in range(2)]
    result = await PlanMaster(plans).run(payload("x"))
    assert result.plans == {"p0": F, "p1": F}
    assert "timed out after 0.01s" in (result.error or "")
    assert not others()


class PreludeServices:
    """Services offering the prelude hook: `step` runs inside the prelude."""

    def __init__(self, step: Callable[..., Any]) -> None:
        self.step = step
        self.calls: list[list[str]] = []

    async def prelude(self, payload: TaskPayload, plans: Any, memo: Any) -> None:
        self.calls.append([plan.name for plan in plans])
        await self.step(memo)


async def test_prelude_fills_the_memo_once_before_the_plans_start() -> None:
    computed: list[str] = []

    async def encode() -> str:
        computed.append("encode")
        await asyncio.sleep(0.01)
        return "vector"

    async def step(memo: Any) -> None:
        await memo.get_or_compute("emb", encode)

    seen: dict[str, bool] = {}

    def reads(plan: str) -> Callable[..., Any]:
        async def task(ctx: TaskContext) -> str:
            seen[plan] = ctx.memo.entry("emb").done()  # done before the plan started
            return await ctx.memo.get_or_compute("emb", encode)  # type: ignore[no-any-return]
        return task

    services = PreludeServices(step)
    plans = [Plan(name, {"t": reads(name)}, eligibility=name) for name in ("a", "b", "c")]
    results = await PlanMaster(plans, services=services).run_plans(payload("a", "b", "c"))
    assert [r.status for r in results] == [S, S, S]
    assert services.calls == [["a", "b", "c"]] and computed == ["encode"]
    assert seen == {"a": True, "b": True, "c": True}


async def test_a_failing_prelude_leaves_the_plans_their_own_errors() -> None:
    async def step(memo: Any) -> None:
        raise RuntimeError("model down")

    plans = [Plan("a", {"t": contributes(["ok"])}, eligibility="a")]
    result = await PlanMaster(plans, services=PreludeServices(step)).run(payload("a"))
    assert result.success and result.labels == ["ok"]


async def test_a_prelude_past_the_plans_limit_stops_being_waited_for() -> None:
    """The prelude gets the shortest task limit of the plans; past it the plans start
    (and await the same memo entry under their own limits)."""
    release = asyncio.Event()

    async def slow() -> str:
        await release.wait()
        return "late"

    async def step(memo: Any) -> None:
        await memo.get_or_compute("slow", slow)

    async def task(ctx: TaskContext) -> str:
        release.set()  # the plan started while the computation was still running
        return await ctx.memo.get_or_compute("slow", slow)  # type: ignore[no-any-return]

    plans = [Plan("a", {"t": task}, eligibility="a", task_timeout_s=0.05)]
    master = PlanMaster(plans, services=PreludeServices(step))
    results = await asyncio.wait_for(master.run_plans(payload("a")), 5)
    assert results[0].status == S and results[0].task_status == {"t": S}


async def test_cancelling_the_payload_during_the_prelude_cancels_it() -> None:
    entered = asyncio.Event()

    async def step(memo: Any) -> None:
        entered.set()
        await asyncio.sleep(10)

    plans = [Plan("a", {"t": noop}, eligibility="a")]
    run = asyncio.create_task(PlanMaster(plans, services=PreludeServices(step)).run(payload("a")))
    await entered.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert not others()


class Handed:
    """A Finisher: records when it runs, fails the plans named in `fail`."""

    def __init__(self, log: list[str], fail: dict[str, BaseException] | None = None,
                 hang: bool = False) -> None:
        self.log, self.fail, self.hang = log, fail or {}, hang
        self.plans: list[str] = []

    def tasks(self) -> dict[str, str]:
        return dict.fromkeys(self.plans, "end")

    async def finish(self) -> dict[str, tuple[str, BaseException]]:
        self.log.append("finish")
        if self.hang:
            await asyncio.sleep(10)
        return {plan: ("end", error) for plan, error in self.fail.items()}


def hands_over(log: list[str], finisher: Handed, sleep: float = 0.0) -> Callable[..., Any]:
    async def end(ctx: TaskContext) -> None:
        await asyncio.sleep(sleep)
        ctx.memo.finisher("writes", lambda: finisher).plans.append(ctx.plan)
        log.append(f"{ctx.plan} handed")
    return end


async def test_work_handed_to_the_payload_end_runs_once_after_every_plan() -> None:
    from grebe.errors import StoreUnavailableError

    log: list[str] = []
    finisher = Handed(log, fail={"b": StoreUnavailableError("disk full")})
    plans = [Plan(name, {"end": hands_over(log, finisher, sleep)}, eligibility=name)
             for name, sleep in (("a", 0.0), ("b", 0.01), ("c", 0.0))]
    result = await PlanMaster(plans).run(payload("a", "b", "c"))
    assert log == ["a handed", "c handed", "b handed", "finish"]
    assert result.plans == {"a": S, "b": F, "c": S} and not result.success
    assert result.error == "b/end: StoreUnavailableError: disk full" and result.system_fault


async def test_a_plan_run_alone_finishes_its_own_handed_work() -> None:
    log: list[str] = []
    finisher = Handed(log, fail={"a": ValueError("bad row")})
    plan = Plan("a", {"end": hands_over(log, finisher)}, eligibility="a")
    result = await plan.run(payload("a"))
    assert log == ["a handed", "finish"]
    assert result.status == F and result.task_status == {"end": F}
    assert result.task_errors == {"end": "ValueError: bad row"} and not result.system_fault


async def test_handed_work_past_the_limit_fails_the_plans_that_handed_it() -> None:
    log: list[str] = []
    finisher = Handed(log, hang=True)
    plans = [Plan(n, {"end": hands_over(log, finisher)}, eligibility=n, task_timeout_s=0.05)
             for n in ("a", "b")]
    result = await asyncio.wait_for(PlanMaster(plans).run(payload("a", "b")), 5)
    assert result.plans == {"a": F, "b": F}
    assert result.error == "a/end: TimeoutError: timed out after 0.05s; " \
                           "b/end: TimeoutError: timed out after 0.05s"
    assert not others()
