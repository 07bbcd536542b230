"""The engine's own CPU on the real flows, in one process: where bench/realflows.py's
"engine" figure goes, without a dispatcher, IPC or process start in the way.

    .venv/bin/python bench/realflows_engine.py [--posts N] [--in-flight K] [--profile FILE]

Builds the bundle exactly as an engine process does (`grebe.app.bundles.build_bundle`:
the six default text flows, local broker producer, SQLite store under a temporary
directory, real models), starts it, runs N real tweets (bench/data/tweets.jsonl) through
its PlanMaster with K payloads at once on uvloop (as `engine_process` does), and prints:

- CPU ms per post of the whole process and of the event loop's thread alone
  (`time.thread_time`; the encoder and other model batchers run in worker threads, so
  the loop thread's CPU is the plan orchestration, the flows' Python and the sinks);
- with `--tasks`, asyncio tasks created per post, by coroutine (a counting task
  factory, which itself costs ~7% of the loop thread, so it is off by default);
- the event loop thread's garbage-collector passes and their CPU per post (the engine's
  runtime tuning, `engine_process.tune_engine`, is applied after the warm-up as an
  engine applies it once started; `--untuned` leaves CPython's defaults);
- the CPU ms per post of each thread by name (/proc/self/task: the loop is
  `MainThread`, the encoder `grebe-minilm_0`, the store's writer `grebe-store_0`);
- a digest of every post's merged result (labels, reasons, scores to 3 decimals): a cut
  that changes no result shows the same digest before and after. (Vectors and the last
  decimals of scores move with the composition of the encoder's batches, which differs
  from run to run, so they are left out.)

`--profile FILE` writes a cProfile of the measured part (read it with `python -m pstats`,
or `--top N` prints the N functions with the most own time). Use it to find causes;
compare CPU per post only from runs without it (the profiler multiplies Python's cost).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import hashlib
import json
import os
import pstats
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import uvloop

import grebe.blas  # noqa: F401  as `grebe` does: one BLAS thread before NumPy loads

ROOT = Path(__file__).resolve().parent.parent
TWEETS = ROOT / "bench" / "data" / "tweets.jsonl"
FLOWS = ["spam_comment", "post_safety", "safety_ptos", "banger_initial_screen",
         "post_embedding_with_summary", "mm_emb_v5"]
#: Numbers in reasons ("head spam 0.42 >= 0.50") move with the scores' last decimals.
_NUMBER = re.compile(r"\d+\.\d+")
WARM_POSTS = 64  # run before the measure: first calls load lazy parts and fill caches


def payloads(n: int, tag: str) -> list[Any]:
    from grebe.types import Post, TaskPayload

    lines = TWEETS.read_text().splitlines()
    out = []
    for i in range(n):
        raw = json.loads(lines[i % len(lines)])
        raw["id"] = f"{tag}-{i}"
        post = Post(**raw)
        out.append(TaskPayload(payload_id=post.id, post=post, eligibilities=frozenset(FLOWS)))
    return out


def result_digest(results: list[Any]) -> str:
    """A digest of the merged results: what a cut must leave unchanged."""
    digest = hashlib.sha256()
    for result in sorted(results, key=lambda r: r.post_id):
        scores = sorted((k, round(v, 3)) for k, v in result.scores.items())
        reasons = sorted((k, _NUMBER.sub("#", v)) for k, v in result.reasons.items())
        digest.update(repr((result.post_id, sorted(result.labels), scores, reasons,
                            sorted(result.plans.items()))).encode())
    return digest.hexdigest()[:16]


def thread_cpu_s() -> dict[str, float]:
    """CPU seconds (user + system) of each of this process's threads by Python thread
    name (from /proc): the encoder, the store's writer, the log's writer, the loop."""
    ticks = os.sysconf("SC_CLK_TCK")
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    out: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended while it was read
            continue
        name = names.get(int(task.name), "other")
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return out


class GcWatch:
    """Passes of the collector on the calling thread and their thread CPU time."""

    def __init__(self) -> None:
        self.passes = 0
        self.cpu_s = 0.0
        self._started = 0.0
        self._thread = threading.get_ident()

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() != self._thread:
            return
        if phase == "start":
            self._started = time.thread_time()
        else:
            self.passes += 1
            self.cpu_s += time.thread_time() - self._started


def tune_as_an_engine() -> None:
    """What an engine process does once started (a tree before `tune_engine` had only
    `tune_gc`)."""
    from grebe.core import engine_process

    getattr(engine_process, "tune_engine", engine_process.tune_gc)()


async def run(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    from grebe.app.bundles import build_bundle
    from grebe.config import load_config

    config = load_config(
        data_dir=str(data_dir),
        streams=[{"name": "bench", "topic": "posts", "eligibilities": FLOWS}],
        plans={"factory": "grebe.flows.registry:build_bundle"},
        metrics={"enabled": False},
    )
    bundle = build_bundle(config)
    await bundle.start()
    master = bundle.master()
    loop = asyncio.get_running_loop()
    created = [0]
    by_name: dict[str, int] = {}
    default_factory = loop.get_task_factory()

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        created[0] += 1
        name = getattr(coro, "__qualname__", type(coro).__name__)
        by_name[name] = by_name.get(name, 0) + 1
        if default_factory is not None:
            return default_factory(loop, coro, **kwargs)
        return asyncio.Task(coro, loop=loop, **kwargs)

    results: list[Any] = []

    async def through(items: list[Any]) -> None:
        gate = asyncio.Semaphore(args.in_flight)

        async def one(payload: Any) -> None:
            async with gate:
                result = await master.run(payload)
                if not result.success:
                    raise SystemExit(f"{payload.payload_id} failed: {result.error}")
                results.append(result)

        await asyncio.gather(*(one(p) for p in items))

    try:
        await through(payloads(WARM_POSTS, "warm"))
        results.clear()
        work = payloads(args.posts, "p")
        if not args.untuned:
            tune_as_an_engine()
        collector = GcWatch()
        gc.callbacks.append(collector)
        if args.tasks:  # a Python task factory costs ~7% of the loop thread: not by default
            loop.set_task_factory(counting)
        profiler = cProfile.Profile() if args.profile else None
        threads0 = thread_cpu_s()
        cpu0, thread0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        await through(work)
        if profiler is not None:
            profiler.disable()
        cpu = time.process_time() - cpu0
        thread = time.thread_time() - thread0
        wall = time.perf_counter() - wall0
        threads = {name: spent - threads0.get(name, 0.0)
                   for name, spent in thread_cpu_s().items()}
        loop.set_task_factory(default_factory)
        gc.callbacks.remove(collector)
    finally:
        await bundle.stop()
    if profiler is not None:
        profiler.dump_stats(args.profile)
    return {"cpu_ms": 1000 * cpu / args.posts, "loop_ms": 1000 * thread / args.posts,
            "tasks": (created[0] - args.posts) / args.posts if args.tasks else None,
            "posts_per_s": args.posts / wall,
            "threads_ms": {name: 1000 * spent / args.posts for name, spent in sorted(
                threads.items(), key=lambda kv: -kv[1]) if spent > 0},
            "digest": result_digest(results),
            "gc_passes": collector.passes, "gc_ms": 1000 * collector.cpu_s / args.posts,
            "tasks_by_coroutine": {k: v / args.posts for k, v in sorted(
                by_name.items(), key=lambda kv: -kv[1])}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--posts", type=int, default=600)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--untuned", action="store_true",
                        help="CPython's collector thresholds and GIL switch interval")
    parser.add_argument("--profile", metavar="FILE", help="write a cProfile of the measure")
    parser.add_argument("--tasks", action="store_true",
                        help="print the asyncio tasks per post by coroutine")
    parser.add_argument("--top", type=int, default=0, help="print the N hottest functions")
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="grebe-realflows-engine-"))
    try:
        figures = uvloop.run(run(args, data_dir))
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    print(f"{args.posts} posts, {args.in_flight} in flight: CPU {figures['cpu_ms']:.2f} ms "
          f"per post, event loop thread {figures['loop_ms']:.2f} ms, "
          f"{figures['posts_per_s']:.0f} posts/s, results {figures['digest']}")
    print(f"  collector on the loop thread: {figures['gc_passes']} passes, "
          f"{figures['gc_ms']:.3f} ms per post")
    print("  CPU ms per post by thread (/proc, 10 ms ticks): " + ", ".join(
        f"{name} {ms:.2f}" for name, ms in figures["threads_ms"].items()))
    if args.tasks:  # less the bench's own task a post
        print(f"  {figures['tasks']:6.2f} asyncio tasks per post, of which")
        for name, count in figures["tasks_by_coroutine"].items():
            print(f"  {count:6.2f} tasks per post  {name}")
    if args.profile and args.top:
        pstats.Stats(args.profile).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
