"""Micro-benchmark of the plan executor: payloads/s through no-op plans, in one process.

    .venv/bin/python bench/plan.py [--n 20000] [--loop asyncio|uvloop|both]

Cases: a 6-task chain, a 6-task diamond (a -> b, c, d, e -> f), PlanMaster over both
plans at once (one payload eligible for both), and a 6-task chain whose tasks each
suspend once (`await asyncio.sleep(0)`), the executor's slow path that every I/O task
takes (timeout armed, coroutine resumed). Each is measured side by side with
a baseline in the same process: the straightforward executor (one asyncio task per
task awaiting its predecessors' tasks, each under `asyncio.wait_for`). The "bare" line
is the floor: the six no-op coroutines awaited directly with no executor at all.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from grebe.core.plan import Plan
from grebe.core.planmaster import PlanMaster
from grebe.core.task import TaskContext
from grebe.types import Post, TaskPayload

ELIGIBILITY = "bench"
CHAIN = {"b": ["a"], "c": ["b"], "d": ["c"], "e": ["d"], "f": ["e"]}
DIAMOND = {"b": ["a"], "c": ["a"], "d": ["a"], "e": ["a"], "f": ["b", "c", "d", "e"]}


async def noop(ctx: TaskContext) -> None:
    return None


async def yields(ctx: TaskContext) -> None:
    """A task that really suspends once, as any I/O task does (the executor's slow path)."""
    await asyncio.sleep(0)


def make_plan(name: str, deps: Mapping[str, Sequence[str]], task: Any = noop) -> Plan:
    return Plan(name, dict.fromkeys("abcdef", task), deps, eligibility=ELIGIBILITY)


async def naive_run(
    deps: Mapping[str, Sequence[str]], ctx: Any, limit_s: float = 30.0, task: Any = noop
) -> None:
    """The baseline: every task its own asyncio task, awaiting its predecessors."""
    tasks: dict[str, asyncio.Task[Any]] = {}

    async def one(name: str) -> Any:
        for pred in deps.get(name, ()):
            await tasks[pred]
        return await asyncio.wait_for(task(ctx), limit_s)

    for name in "abcdef":
        tasks[name] = asyncio.create_task(one(name))
    await asyncio.gather(*tasks.values())


async def measure(n: int, once: Callable[[], Awaitable[Any]], repeats: int = 5) -> float:
    """Payloads per second, running payloads one after another; the best of `repeats`
    rounds (the machine is shared, the best round is the least disturbed one)."""
    for _ in range(min(n // 10, 2000)):  # warm-up
        await once()
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            await once()
        best = max(best, n / (time.perf_counter() - start))
    return best


async def bench(n: int) -> None:
    payload = TaskPayload(
        payload_id="1", post=Post(id="1", author_id="u"), eligibilities=frozenset({ELIGIBILITY})
    )
    chain, diamond = make_plan("chain", CHAIN), make_plan("diamond", DIAMOND)
    yielding = make_plan("yielding", CHAIN, yields)
    master = PlanMaster([chain, diamond])

    async def bare() -> None:
        for _ in range(6):
            await noop(None)  # type: ignore[arg-type]

    print(f"  {'bare 6 awaits (floor)':<28} {await measure(n, bare):>12,.0f} payloads/s")
    cases: list[tuple[str, Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]]]] = [
        ("chain x6", lambda: chain.run(payload), lambda: naive_run(CHAIN, None)),
        ("diamond x6", lambda: diamond.run(payload), lambda: naive_run(DIAMOND, None)),
        (
            "PlanMaster chain+diamond",
            lambda: master.run(payload),
            lambda: asyncio.gather(naive_run(CHAIN, None), naive_run(DIAMOND, None)),
        ),
        (
            "chain x6, each awaits once",
            lambda: yielding.run(payload),
            lambda: naive_run(CHAIN, None, task=yields),
        ),
    ]
    for label, ours, baseline in cases:
        mine = await measure(n, ours)
        base = await measure(n, baseline)
        print(
            f"  {label:<28} {mine:>12,.0f} payloads/s ({1e6 / mine:5.1f} us)   "
            f"naive {base:>10,.0f} payloads/s ({1e6 / base:5.1f} us)   x{mine / base:.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="payloads per round (5 rounds)")
    parser.add_argument("--loop", choices=["asyncio", "uvloop", "both"], default="both")
    args = parser.parse_args()
    loops = ["asyncio", "uvloop"] if args.loop == "both" else [args.loop]
    for name in loops:
        print(f"event loop: {name}")
        if name == "uvloop":
            import uvloop

            uvloop.run(bench(args.n))
        else:
            asyncio.run(bench(args.n))


if __name__ == "__main__":
    main()
