"""Runtime throughput: posts/s through the local broker -> dispatcher -> engine processes
-> the 6-task `noop` plan -> committed offsets, against taskiq's InMemoryBroker running
the same number of no-op tasks, in the same process run.

    .venv/bin/python bench/runtime.py [--posts 100000] [--processes 2]

grebe: N posts are appended to a fresh local log first (not timed); the clock runs from
the moment the runtime is up (engines started) until the consumer group has committed
all N offsets, so every post was polled from SQLite, decoded, sent to an engine, run
through six tasks, returned, acked and its offset durably committed.

taskiq: the same number of no-op tasks (six per post), each `async def noop()` kicked
with `.kiq()` on an InMemoryBroker (no real broker, no durability, no ordering or
commit bookkeeping), until `wait_all()` returns. The stricter comparison, one taskiq
task per grebe post, is printed too.

Both rates are wall-clock on a machine shared with other work; the CPU time per post
(this process plus the engine processes) is printed beside them because it does not
swing with the neighbours' load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from grebe.app.supervisor import Runtime
from grebe.brokers.factory import local_log
from grebe.config import load_config
from grebe.core.engine_process import tune_gc
from grebe.types import Post

APPEND_BATCH = 10_000
TASKS_PER_POST = 6  # the noop plan's tasks


async def _prepare(config, posts: int) -> None:  # type: ignore[no-untyped-def]
    log = local_log(config)
    await log.open()
    encode = msgspec.json.Encoder().encode
    for start in range(0, posts, APPEND_BATCH):
        await log.append(
            "posts",
            [
                (f"p{i}".encode(), encode(Post(id=f"p{i}", author_id=f"u{i % 97}",
                                               text=f"post number {i} about nothing")))
                for i in range(start, min(posts, start + APPEND_BATCH))
            ],
        )
    await log.close()


async def grebe_rate(posts: int, processes: int, data_dir: Path) -> dict[str, float]:
    config = load_config(
        data_dir=data_dir,
        streams=[{"name": "posts", "eligibilities": ["noop"]}],
        engine={"processes": processes},
        metrics={"enabled": os.environ.get("BENCH_METRICS", "1") == "1", "port": 0},
        output={"broker": "none"},
        store={"backend": "memory"},
        dispatcher=json.loads(os.environ.get("BENCH_DISPATCHER", "{}")),
        local=json.loads(os.environ.get("BENCH_LOCAL", "{}")),
    )
    await _prepare(config, posts)
    runtime = Runtime(config)
    started = time.perf_counter()
    await runtime.start()
    tune_gc()  # as `grebe run` does once started
    pids = list(getattr(runtime.executor, "pids", []))
    own_before, engines_before = _cpu_seconds([]), _cpu_seconds(pids, own=False)
    ready = time.perf_counter()
    await runtime.wait_caught_up()
    done = time.perf_counter()
    own = _cpu_seconds([]) - own_before
    engines = _cpu_seconds(pids, own=False) - engines_before
    await runtime.stop()
    return {
        "posts": posts, "startup_s": ready - started, "seconds": done - ready,
        "posts_per_s": posts / (done - ready),
        "cpu_us_per_post": (own + engines) / posts * 1e6,
        "dispatcher_cpu_us_per_post": own / posts * 1e6,
    }


def _cpu_seconds(pids: list[int], own: bool = True) -> float:
    """CPU time (user + system) of this process and the engine processes. On a shared
    machine wall-clock rates swing with the neighbours' load; CPU per post does not."""
    usage = os.times()
    total = usage.user + usage.system if own else 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


async def taskiq_rate(tasks: int) -> dict[str, float]:
    from taskiq import InMemoryBroker

    broker = InMemoryBroker()

    @broker.task
    async def noop() -> None:
        return None

    await broker.startup()
    cpu_before = _cpu_seconds([])
    started = time.perf_counter()
    for _ in range(tasks):
        await noop.kiq()
    await broker.wait_all()
    seconds = time.perf_counter() - started
    cpu = _cpu_seconds([]) - cpu_before
    await broker.shutdown()
    return {
        "tasks": tasks, "seconds": seconds, "tasks_per_s": tasks / seconds,
        "cpu_us_per_task": cpu / tasks * 1e6,
    }


def _run(coro):  # type: ignore[no-untyped-def]
    """uvloop for both sides when installed, as `grebe run` uses it."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def _median(rows: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(row[key] for row in rows) for key in rows[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--posts", type=int, default=100_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternate grebe and taskiq this many times; medians are shown")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args()

    grebe_runs, taskiq_runs = [], []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="grebe-bench-") as tmp:
            grebe_runs.append(_run(grebe_rate(args.posts, args.processes, Path(tmp))))
        taskiq_runs.append(_run(taskiq_rate(args.posts * TASKS_PER_POST)))
    grebe, baseline = _median(grebe_runs), _median(taskiq_runs)
    per_post = baseline["tasks_per_s"] / TASKS_PER_POST  # taskiq doing a post's six tasks
    ratio = grebe["posts_per_s"] / per_post
    strict = grebe["posts_per_s"] / baseline["tasks_per_s"]
    cpu_ratio = baseline["cpu_us_per_task"] * TASKS_PER_POST / grebe["cpu_us_per_post"]
    if args.json:
        print(json.dumps({"grebe": grebe_runs, "taskiq": taskiq_runs, "ratio": ratio,
                          "ratio_one_task_per_post": strict, "cpu_ratio": cpu_ratio}))
        return
    print(f"machine: {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}, python "
          f"{sys.version.split()[0]}; median of {args.rounds} alternating rounds")
    print(f"grebe   local broker -> {args.processes} engine(s) -> noop plan (6 tasks) -> "
          f"committed: {grebe['posts_per_s']:>8,.0f} posts/s, "
          f"{grebe['cpu_us_per_post']:.0f} us CPU/post "
          f"({grebe['dispatcher_cpu_us_per_post']:.0f} in the dispatcher process; "
          f"{args.posts:,} posts in {grebe['seconds']:.2f} s; "
          f"start-up {grebe['startup_s']:.2f} s)")
    print(f"taskiq  InMemoryBroker, {TASKS_PER_POST} no-op tasks per post:"
          f"{' ' * 21}{per_post:>8,.0f} posts/s, "
          f"{baseline['cpu_us_per_task'] * TASKS_PER_POST:.0f} us CPU/post "
          f"({baseline['tasks_per_s']:,.0f} tasks/s)")
    rounds = ", ".join(f"{run['posts_per_s']:,.0f}" for run in grebe_runs)
    taskiq_rounds = ", ".join(f"{run['tasks_per_s']:,.0f}" for run in taskiq_runs)
    print(f"per round: grebe {rounds} posts/s; taskiq {taskiq_rounds} tasks/s")
    print(f"ratio grebe/taskiq: {ratio:.1f}x wall, {cpu_ratio:.1f}x CPU "
          f"(against one taskiq task per post: {strict:.2f}x)")


if __name__ == "__main__":
    main()
