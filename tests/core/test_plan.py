from __future__ import annotations

import asyncio
import itertools
import math
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grebe.core.memo import PayloadMemo
from grebe.core.plan import SKIP_DEADLINE, SKIP_RETURNED, Plan
from grebe.core.task import SKIP, SkipTask, TaskContext, TaskSpec
from grebe.errors import PlanError
from grebe.types import Post, TaskPayload, TaskStatus

S, K, F = TaskStatus.SUCCESS, TaskStatus.SKIPPED, TaskStatus.FAILED


def payload(deadline: float | None = None) -> TaskPayload:
    return TaskPayload(
        payload_id="p1", post=Post(id="1", author_id="u"), eligibilities=frozenset({"e"}),
        deadline=deadline,
    )


def others() -> set[asyncio.Task[Any]]:
    """Asyncio tasks other than the test's own: must be empty after a run."""
    return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]


class Recorder:
    """Builds tasks that record that they ran (and in which order)."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def ok(self, name: str, value: Any = None, sleep: float | None = None) -> Callable[..., Any]:
        async def task(ctx: TaskContext) -> Any:
            self.ran.append(name)
            if sleep is not None:
                await asyncio.sleep(sleep)
            return name if value is None else value

        return task

    def returns(self, name: str, value: Any) -> Callable[..., Any]:
        async def task(ctx: TaskContext) -> Any:
            self.ran.append(name)
            return value

        return task

    def raises(self, name: str, exc: BaseException) -> Callable[..., Any]:
        async def task(ctx: TaskContext) -> Any:
            self.ran.append(name)
            raise exc

        return task


async def noop(ctx: TaskContext) -> None:
    return None


# --- construction ---


def test_plan_exposes_its_structure() -> None:
    plan = Plan(
        "p", {"sink": noop, "fetch": noop, "classify": noop},
        {"sink": ["classify", "classify"], "classify": ["fetch"]}, eligibility="e", version="3",
    )
    assert plan.name == "p" and plan.eligibility == "e" and plan.version == "3"
    assert plan.task_names == ("sink", "fetch", "classify")
    assert plan.topological_order == ("fetch", "classify", "sink")
    assert dict(plan.deps) == {"sink": ("classify",), "fetch": (), "classify": ("fetch",)}
    with pytest.raises(TypeError):
        plan.deps["x"] = ()  # type: ignore[index]


def test_topological_order_breaks_ties_by_declaration() -> None:
    plan = Plan("p", dict.fromkeys("dcba", noop), {"a": ["d"]}, eligibility="e")
    assert plan.topological_order == ("d", "c", "b", "a")


@pytest.mark.parametrize(
    ("tasks", "deps", "message"),
    [
        ({"a": noop}, {"a": ["ghost"]}, "'a' depends on unknown task(s): 'ghost'"),
        ({"a": noop}, {"ghost": ["a"]}, "deps given for unknown task(s): 'ghost'"),
        ({"a": noop, "b": noop}, {"b": "a"}, "must be a list of task names"),
        ({"a": noop}, {"a": ["a"]}, "has a cycle: a -> a"),
        ({"a": noop, "b": noop}, {"a": ["b"], "b": ["a"]}, "has a cycle: a -> b -> a"),
        ({"a": "not callable"}, None, "task 'a' is not callable"),
        ({}, None, "has no tasks"),
        ({"a": TaskSpec(noop, timeout_s=0)}, None, "timeout of task 'a' must be a positive"),
        ({"a": TaskSpec(noop, timeout_s=math.nan)}, None, "must be a positive number"),
    ],
)
def test_plan_rejects_malformed_definitions(tasks: Any, deps: Any, message: str) -> None:
    with pytest.raises(PlanError) as info:
        Plan("x", tasks, deps, eligibility="e")
    assert message in str(info.value)
    assert "'x'" in str(info.value)


def test_cycle_message_names_the_cycle() -> None:
    with pytest.raises(PlanError, match=re.escape("plan 'x' has a cycle: a -> b -> c -> a")):
        Plan("x", {"a": noop, "b": noop, "c": noop, "d": noop},
             {"b": ["a"], "c": ["b"], "a": ["c"], "d": ["a"]}, eligibility="e")


@pytest.mark.parametrize("bad", [0, -1.0, True, "30"])
def test_plan_rejects_bad_default_timeout(bad: Any) -> None:
    with pytest.raises(PlanError, match="task_timeout_s"):
        Plan("x", {"a": noop}, eligibility="e", task_timeout_s=bad)


def test_plan_needs_name_and_eligibility() -> None:
    with pytest.raises(PlanError):
        Plan("", {"a": noop}, eligibility="e")
    with pytest.raises(PlanError):
        Plan("x", {"a": noop}, eligibility="")


# --- running ---


async def test_chain_succeeds_and_passes_results_and_output() -> None:
    seen: dict[str, Any] = {}

    async def fetch(ctx: TaskContext) -> int:
        return 41

    async def classify(ctx: TaskContext) -> int:
        ctx.output.labels.append("spam")
        ctx.output.scores["spam"] = 0.9
        return ctx.results["fetch"] + 1

    async def sink(ctx: TaskContext) -> None:
        seen.update(ctx.results, plan=ctx.plan, services=ctx.services, memo=ctx.memo)

    plan = Plan("p", {"fetch": fetch, "classify": classify, "sink": sink},
                {"classify": ["fetch"], "sink": ["classify"]}, eligibility="e")
    memo = PayloadMemo()
    result = await plan.run(payload(), services="svc", memo=memo)
    assert result.status == S and result.error is None
    assert result.task_status == {"fetch": S, "classify": S, "sink": S}
    assert result.output.labels == ["spam"] and result.output.scores == {"spam": 0.9}
    assert seen == {"fetch": 41, "classify": 42, "plan": "p", "services": "svc", "memo": memo}
    assert result.plan == "p" and result.version == "1"
    assert result.started_at <= result.finished_at
    assert not others()


async def test_skip_cascades_downstream_without_running() -> None:
    rec = Recorder()
    plan = Plan(
        "p", {"a": rec.ok("a"), "b": rec.returns("b", SKIP), "c": rec.ok("c"), "d": rec.ok("d"),
              "e": rec.ok("e")},
        {"b": ["a"], "c": ["b"], "d": ["c"], "e": ["a"]}, eligibility="e",
    )
    result = await plan.run(payload())
    assert result.task_status == {"a": S, "b": K, "c": K, "d": K, "e": S}
    assert sorted(rec.ran) == ["a", "b", "e"]
    assert result.status == K and result.error is None
    assert result.skip_reasons["b"] == SKIP_RETURNED
    assert result.skip_reasons["c"] == "upstream 'b' was skipped"
    assert result.skip_reasons["d"] == "upstream 'c' was skipped"


async def test_skip_task_exception_is_a_skip_with_its_reason() -> None:
    rec = Recorder()
    plan = Plan("p", {"a": rec.raises("a", SkipTask("not english")), "b": rec.ok("b")},
                {"b": ["a"]}, eligibility="e")
    result = await plan.run(payload())
    assert result.task_status == {"a": K, "b": K} and rec.ran == ["a"]
    assert result.skip_reasons == {"a": "not english", "b": "upstream 'a' was skipped"}


async def test_failure_fails_the_plan_skips_dependents_and_lets_other_branches_finish() -> None:
    rec = Recorder()
    plan = Plan(
        "p",
        {"root": rec.ok("root"), "bad": rec.raises("bad", ValueError("boom")),
         "after_bad": rec.ok("after_bad"), "slow": rec.ok("slow", sleep=0.01),
         "after_slow": rec.ok("after_slow")},
        {"bad": ["root"], "after_bad": ["bad", "slow"], "slow": ["root"],
         "after_slow": ["slow"]},
        eligibility="e",
    )
    result = await plan.run(payload())
    assert result.status == F
    assert result.task_status == {"root": S, "bad": F, "after_bad": K, "slow": S, "after_slow": S}
    assert "after_bad" not in rec.ran and "after_slow" in rec.ran
    assert result.error == "bad: ValueError: boom"
    assert result.task_errors == {"bad": "ValueError: boom"}
    assert result.skip_reasons["after_bad"] == "upstream 'bad' failed"


async def test_several_failures_are_joined_in_topological_order() -> None:
    rec = Recorder()
    plan = Plan("p", {"z": rec.raises("z", KeyError("k")), "a": rec.raises("a", OSError())},
                eligibility="e")
    result = await plan.run(payload())
    assert result.error == "z: KeyError: 'k'; a: OSError"


async def test_task_timeout_from_spec_and_from_plan_default() -> None:
    rec = Recorder()
    plan = Plan(
        "p",
        {"fast_limit": TaskSpec(rec.ok("fast_limit", sleep=1), timeout_s=0.01),
         "default_limit": rec.ok("default_limit", sleep=1),
         "unlimited": TaskSpec(rec.ok("unlimited", sleep=0.03), timeout_s=math.inf),
         "after": rec.ok("after")},
        {"after": ["fast_limit"]}, eligibility="e", task_timeout_s=0.02,
    )
    started = time.perf_counter()
    result = await plan.run(payload())
    assert time.perf_counter() - started < 0.5
    assert result.task_status == {"fast_limit": F, "default_limit": F, "unlimited": S, "after": K}
    assert result.task_errors == {
        "fast_limit": "TimeoutError: timed out after 0.01s",
        "default_limit": "TimeoutError: timed out after 0.02s",
    }
    assert not others()


async def test_timeout_counts_synchronous_work_before_the_first_await() -> None:
    async def busy_then_await(ctx: TaskContext) -> str:
        time.sleep(0.03)  # noqa: ASYNC251 — deliberate blocking work before the first await
        await asyncio.sleep(0)
        return "done"

    plan = Plan("p", {"t": TaskSpec(busy_then_await, timeout_s=0.01)}, eligibility="e")
    result = await plan.run(payload())
    assert result.task_status == {"t": F}
    assert result.task_errors["t"] == "TimeoutError: timed out after 0.01s"


async def test_a_tasks_own_timeout_error_keeps_its_message() -> None:
    rec = Recorder()
    plan = Plan("p", {"t": rec.raises("t", TimeoutError("upstream API slow"))}, eligibility="e")
    result = await plan.run(payload())
    assert result.error == "t: TimeoutError: upstream API slow"


async def test_a_stray_cancelled_error_from_a_task_is_a_failure_not_a_cancellation() -> None:
    async def stray(ctx: TaskContext) -> None:
        fut = asyncio.get_running_loop().create_future()
        fut.cancel()
        await fut

    rec = Recorder()
    plan = Plan("p", {"stray": stray, "other": rec.ok("other")}, eligibility="e")
    result = await plan.run(payload())
    assert result.task_status == {"stray": F, "other": S}
    assert result.task_errors["stray"].startswith("CancelledError")


async def test_expired_payload_skips_every_task() -> None:
    rec = Recorder()
    plan = Plan("p", {"a": rec.ok("a"), "b": rec.ok("b"), "c": rec.ok("c")}, {"b": ["a"]},
                eligibility="e")
    result = await plan.run(payload(deadline=time.time() - 1))
    assert result.status == K and rec.ran == []
    assert result.skip_reasons == {
        "a": SKIP_DEADLINE, "b": "upstream 'a' was skipped", "c": SKIP_DEADLINE,
    }


async def test_deadline_passing_mid_run_skips_the_tasks_not_started() -> None:
    rec = Recorder()
    plan = Plan("p", {"a": rec.ok("a", sleep=0.1), "b": rec.ok("b"), "c": rec.ok("c")},
                {"b": ["a"], "c": ["b"]}, eligibility="e")
    result = await plan.run(payload(deadline=time.time() + 0.05))
    assert result.task_status == {"a": S, "b": K, "c": K} and rec.ran == ["a"]
    assert result.skip_reasons["b"] == SKIP_DEADLINE


async def test_root_tasks_run_concurrently() -> None:
    # Each root waits for the other: only true concurrency can finish this plan.
    a_started, b_started = asyncio.Event(), asyncio.Event()

    async def a(ctx: TaskContext) -> None:
        a_started.set()
        await b_started.wait()

    async def b(ctx: TaskContext) -> None:
        b_started.set()
        await a_started.wait()

    plan = Plan("p", {"a": a, "b": b}, eligibility="e", task_timeout_s=1)
    result = await plan.run(payload())
    assert result.status == S


async def test_a_task_starts_when_its_own_predecessors_finish() -> None:
    # `slow` waits for `unblock`, which comes after `quick` in another branch: if
    # `unblock` waited for `slow` (e.g. level-by-level execution), this would time out.
    released = asyncio.Event()

    async def slow(ctx: TaskContext) -> None:
        await released.wait()

    async def unblock(ctx: TaskContext) -> None:
        released.set()

    plan = Plan("p", {"slow": slow, "quick": noop, "unblock": unblock, "end": noop},
                {"unblock": ["quick"], "end": ["slow", "unblock"]},
                eligibility="e", task_timeout_s=0.5)
    result = await plan.run(payload())
    assert result.status == S


async def test_wide_level_runs_all_branches_and_joins() -> None:
    rec = Recorder()
    branches = {f"b{i}": rec.ok(f"b{i}", sleep=0.001 * (i % 2)) for i in range(6)}
    plan = Plan("p", {"a": rec.ok("a"), **branches, "z": rec.ok("z")},
                {**{b: ["a"] for b in branches}, "z": list(branches)}, eligibility="e")
    result = await plan.run(payload())
    assert result.status == S and rec.ran[0] == "a" and rec.ran[-1] == "z"
    assert len(rec.ran) == 8
    assert not others()


async def test_non_coroutine_awaitables_and_bad_return_values() -> None:
    def returns_future(ctx: TaskContext) -> asyncio.Future[str]:
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.001, fut.set_result, "from future")
        return fut

    def returns_never_done(ctx: TaskContext) -> asyncio.Future[str]:
        return asyncio.get_running_loop().create_future()

    def not_async(ctx: TaskContext) -> int:
        return 3

    plan = Plan("p", {"fut": returns_future, "never": TaskSpec(returns_never_done, 0.01),
                      "sync": not_async}, eligibility="e")
    result = await plan.run(payload())
    assert result.task_status == {"fut": S, "never": F, "sync": F}
    assert result.task_errors["never"] == "TimeoutError: timed out after 0.01s"
    assert result.task_errors["sync"].startswith("TypeError")


async def test_cancelling_run_cancels_every_task_and_leaves_nothing_running() -> None:
    cancelled: list[str] = []
    started = asyncio.Event()

    def hang(name: str) -> Callable[..., Any]:
        async def task(ctx: TaskContext) -> None:
            try:
                started.set()
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append(name)
                raise

        return task

    plan = Plan("p", {"a": hang("a"), "b": hang("b"), "c": hang("c"), "d": noop},
                {"d": ["a", "b", "c"]}, eligibility="e")
    runner = asyncio.create_task(plan.run(payload()))
    await started.wait()
    await asyncio.sleep(0.001)
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner
    assert sorted(cancelled) == ["a", "b", "c"]
    assert not others()


async def test_run_without_memo_closes_its_own_memo() -> None:
    computing = asyncio.Event()

    async def expensive() -> str:
        computing.set()
        await asyncio.sleep(10)
        return "never"

    async def uses_memo(ctx: TaskContext) -> str:
        return await ctx.memo.get_or_compute("emb", expensive)

    plan = Plan("p", {"t": TaskSpec(uses_memo, timeout_s=0.01)}, eligibility="e")
    result = await plan.run(payload())
    assert computing.is_set() and result.task_status == {"t": F}
    assert not others()  # the orphaned memo computation was cancelled and awaited


async def test_concurrent_runs_of_one_plan_are_independent() -> None:
    async def add(ctx: TaskContext) -> str:
        await asyncio.sleep(0)
        ctx.output.labels.append(ctx.payload.payload_id)
        return ctx.payload.payload_id

    async def check(ctx: TaskContext) -> None:
        assert ctx.results["add"] == ctx.payload.payload_id

    plan = Plan("p", {"add": add, "check": check}, {"check": ["add"]}, eligibility="e")
    payloads = [TaskPayload(payload_id=str(i), post=Post(id=str(i), author_id="u"))
                for i in range(100)]
    results = await asyncio.gather(*(plan.run(p) for p in payloads))
    assert [r.output.labels for r in results] == [[str(i)] for i in range(100)]
    assert all(r.status == S for r in results)


# --- properties ---

BEHAVIOURS = ["ok", "ok_await", "skip", "skip_raise", "raise", "hang"]
HANG_TIMEOUT_S = 0.002


@st.composite
def dags(draw: st.DrawFn, max_tasks: int = 8) -> tuple[int, dict[int, list[int]]]:
    n = draw(st.integers(1, max_tasks))
    deps = {j: sorted(draw(st.sets(st.integers(0, j - 1), max_size=3))) if j else []
            for j in range(n)}
    return n, deps


def build(n: int, deps: dict[int, list[int]], behaviours: list[str], ran: list[int]) -> Plan:
    def task(i: int, behaviour: str) -> Callable[..., Any]:
        async def fn(ctx: TaskContext) -> Any:
            ran.append(i)
            for pred in deps[i]:  # predecessors' results are visible
                assert ctx.results[f"t{pred}"] == pred
            if behaviour == "ok_await":
                await asyncio.sleep(0)
            elif behaviour == "skip":
                return SKIP
            elif behaviour == "skip_raise":
                raise SkipTask("nope")
            elif behaviour == "raise":
                raise RuntimeError(f"t{i} broke")
            elif behaviour == "hang":
                await asyncio.sleep(1)
            return i

        return fn

    # Only hanging tasks get the tiny limit, so a loaded machine cannot make a task
    # that merely awaits once time out.
    return Plan(
        "prop",
        {f"t{i}": TaskSpec(task(i, behaviours[i]), HANG_TIMEOUT_S if behaviours[i] == "hang"
                           else None) for i in range(n)},
        {f"t{j}": [f"t{i}" for i in preds] for j, preds in deps.items()},
        eligibility="e", task_timeout_s=5,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dag=dags(),
    data=st.data(),
    deadline_mode=st.sampled_from(["none", "none", "expired", "mid_run"]),
)
def test_random_plans_always_terminate_with_consistent_statuses(
    dag: tuple[int, dict[int, list[int]]], data: st.DataObject, deadline_mode: str
) -> None:
    n, deps = dag
    behaviours = data.draw(st.lists(st.sampled_from(BEHAVIOURS), min_size=n, max_size=n))
    ran: list[int] = []
    plan = build(n, deps, behaviours, ran)
    deadline = {"none": None, "expired": time.time() - 1, "mid_run": time.time() + 0.001}[
        deadline_mode
    ]

    async def scenario() -> None:
        result = await asyncio.wait_for(plan.run(payload(deadline)), 10)
        assert not others(), "a task of the plan is still running"
        status = {int(name[1:]): s for name, s in result.task_status.items()}
        assert set(status) == set(range(n))  # every task decided
        for i in range(n):
            preds_ok = all(status[p] == S for p in deps[i])
            if i in ran:
                assert preds_ok, f"t{i} ran although a predecessor did not succeed"
                expected = {"ok": S, "ok_await": S, "skip": K, "skip_raise": K, "raise": F,
                            "hang": F}[behaviours[i]]
                assert status[i] == expected
            else:
                assert status[i] == K
                if preds_ok:  # only the deadline may stop a task whose inputs are fine
                    assert deadline_mode != "none"
                    assert result.skip_reasons[f"t{i}"] == SKIP_DEADLINE
        assert len(ran) == len(set(ran))  # nothing ran twice
        statuses = set(status.values())
        expected_plan = F if F in statuses else K if K in statuses else S
        assert result.status == expected_plan
        failed = [f"t{i}" for i in plan_order(plan) if status[i] == F]
        assert (result.error is None) == (not failed)
        if failed:
            assert [e.split(":")[0] for e in result.error.split("; ")] == failed
        if deadline_mode == "expired":
            assert ran == []

    asyncio.run(scenario())


def plan_order(plan: Plan) -> list[int]:
    return [int(name[1:]) for name in plan.topological_order]


@settings(max_examples=150, deadline=None)
@given(dag=dags(max_tasks=10), data=st.data())
def test_random_dags_are_accepted_and_injected_back_edges_rejected(
    dag: tuple[int, dict[int, list[int]]], data: st.DataObject
) -> None:
    n, deps = dag
    names = {f"t{j}": [f"t{i}" for i in preds] for j, preds in deps.items()}
    plan = Plan("g", dict.fromkeys(names, noop), names, eligibility="e")
    position = {name: k for k, name in enumerate(plan.topological_order)}
    assert all(position[p] < position[t] for t, preds in names.items() for p in preds)
    if n < 2:
        return
    i = data.draw(st.integers(0, n - 2))
    j = data.draw(st.integers(i + 1, n - 1))
    names[f"t{j}"] = sorted({*names[f"t{j}"], f"t{i}"})  # t{j} depends on t{i} ...
    names[f"t{i}"] = sorted({*names[f"t{i}"], f"t{j}"})  # ... and t{i} on t{j}: a cycle
    with pytest.raises(PlanError) as info:
        Plan("g", dict.fromkeys(names, noop), names, eligibility="e")
    message = str(info.value)
    assert message.startswith("plan 'g' has a cycle: ")
    cycle = message.removeprefix("plan 'g' has a cycle: ").split(" -> ")
    assert len(cycle) >= 3 and cycle[0] == cycle[-1]
    for a, b in itertools.pairwise(cycle):
        assert a in names[b], f"{a} -> {b} is not an edge"  # b depends on a


async def test_an_executor_bug_in_a_worker_surfaces_instead_of_hanging(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from grebe.core import plan_run as plan_module

    original = plan_module.PlanRun._succeed

    def broken_succeed(self: Any, k: int, value: Any) -> None:
        if value == "b":
            raise RuntimeError("executor bug")
        original(self, k, value)

    monkeypatch.setattr(plan_module.PlanRun, "_succeed", broken_succeed)
    rec = Recorder()
    # Both roots suspend, so "b" runs in a spawned worker; "c" waits on it forever.
    plan = Plan("p", {"a": rec.ok("a", sleep=0.001), "b": rec.ok("b", sleep=0.002),
                      "c": rec.ok("c")}, {"c": ["b"]}, eligibility="e")
    with pytest.raises(RuntimeError, match="executor bug"):
        await asyncio.wait_for(plan.run(payload()), 2)
    assert not others()


async def test_tasks_that_do_not_suspend_cost_no_asyncio_task() -> None:
    loop = asyncio.get_running_loop()
    created: list[Any] = []

    def counting_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        created.append(coro)
        return asyncio.Task(coro, loop=loop, **kwargs)

    async def yields(ctx: TaskContext) -> None:
        await asyncio.sleep(0)

    branches = ["b", "c", "d", "e"]
    deps = {**{b: ["a"] for b in branches}, "f": branches}
    loop.set_task_factory(counting_factory)
    try:
        result = await Plan("noop", dict.fromkeys("abcdef", noop), deps, eligibility="e").run(
            payload()
        )
        assert result.status == S and created == []
        # When every branch suspends, the worker keeps one and the other three get tasks.
        tasks = {"a": noop, **dict.fromkeys(branches, yields), "f": noop}
        result = await Plan("io", tasks, deps, eligibility="e").run(payload())
        assert result.status == S and len(created) == 3
    finally:
        loop.set_task_factory(None)
