"""Dispatcher throughput: messages/s from a pre-filled in-memory source through an
executor that does no work, i.e. the dispatcher's own cost per message (decode, payload,
slots, submit, callback, completer, ack, offset tracking in the source).

Two executors: `next-tick` resolves each future on the next loop iteration, as results
arriving over IPC do (the done-callback path); `immediate` returns futures already
resolved (the dispatcher's fast path, no callback). Baseline, in the same process: the
obvious loop, one asyncio.Task per message that decodes, awaits the executor and acks.
Rates are messages per CPU-second of this process (time.process_time), so a machine
shared with other work still gives comparable figures; wall-clock rates are printed too.
Run: `.venv/bin/python bench/dispatcher.py [--uvloop]`.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from grebe.brokers.memory import MemorySource
from grebe.codec import decode_envelope, encode
from grebe.core.dispatcher import Dispatcher, Stream
from grebe.core.metrics import PrometheusMetrics
from grebe.core.settings import DispatcherSettings, StreamSettings
from grebe.core.source import Outcome
from grebe.types import Envelope, Post, TaskPayload, TaskResult, User


class ImmediateExecutor:
    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def submit(self, payload: TaskPayload) -> asyncio.Future[TaskResult]:
        future: asyncio.Future[TaskResult] = asyncio.get_running_loop().create_future()
        future.set_result(
            TaskResult(payload_id=payload.payload_id, post_id=payload.post.id, success=True)
        )
        return future


class NextTickExecutor(ImmediateExecutor):
    def submit(self, payload: TaskPayload) -> asyncio.Future[TaskResult]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[TaskResult] = loop.create_future()
        result = TaskResult(payload_id=payload.payload_id, post_id=payload.post.id, success=True)
        loop.call_soon(future.set_result, result)
        return future


def filled_source(name: str, n: int, partitions: int = 4) -> MemorySource:
    source = MemorySource(name, partitions=partitions)
    for i in range(n):
        post = Post(id=str(i), author_id=f"u{i % 1000}", text=f"post number {i} #grebe")
        source.put(encode(Envelope(post=post, user=User(id=f"u{i % 1000}"))))
    return source


Rate = tuple[float, float]  # (messages per CPU-second, messages per wall-second)


def rates(n: int, cpu_started: float, wall_started: float) -> Rate:
    return (
        n / (time.process_time() - cpu_started), n / (time.perf_counter() - wall_started)
    )


async def run_dispatcher(
    n: int, streams: int, with_metrics: bool, executor: ImmediateExecutor
) -> Rate:
    sources = [filled_source(f"s{k}", n // streams) for k in range(streams)]
    config = DispatcherSettings(max_in_flight=2048)  # as measured: 2048 in flight, batches of 512
    metrics = PrometheusMetrics(CollectorRegistry()) if with_metrics else None
    dispatcher = Dispatcher(
        [Stream(s, StreamSettings(name=s.name, eligibilities=["spam_comment"])) for s in sources],
        executor, config, metrics=metrics,
    )
    cpu_started, wall_started = time.process_time(), time.perf_counter()
    task = asyncio.create_task(dispatcher.run())
    for source in sources:
        await source.wait_acked(n // streams)
    result = rates(n // streams * streams, cpu_started, wall_started)
    await dispatcher.stop(1.0)
    await task
    assert dispatcher.stats.done == n // streams * streams
    return result


async def run_baseline(n: int) -> Rate:
    """One task per message, bounded by a semaphore: what the dispatcher avoids."""
    source = filled_source("base", n)
    executor = NextTickExecutor()
    limit = asyncio.Semaphore(2048)

    async def handle(message) -> None:  # type: ignore[no-untyped-def]
        try:
            envelope = decode_envelope(message.value)
            payload = TaskPayload(
                payload_id=f"base:{message.partition}:{message.offset}", post=envelope.post,
                user=envelope.user, eligibilities=frozenset({"spam_comment"}), source="base",
            )
            result = await executor.submit(payload)
            await source.ack(message, Outcome.DONE if result.success else Outcome.DEAD)
        finally:
            limit.release()

    cpu_started, wall_started = time.process_time(), time.perf_counter()
    tasks = set()
    while len(source.acks) < n:
        batch = await source.poll(512, 0.1)
        for message in batch:
            await limit.acquire()
            task = asyncio.create_task(handle(message))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if not batch:
            await source.wait_acked(n)
    return rates(n, cpu_started, wall_started)


def best_of(repeats: int, run: Callable[[], Rate]) -> Rate:
    return max(run() for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop")
    args = parser.parse_args()
    runner: Callable[..., Rate] = asyncio.run
    if args.uvloop:
        import uvloop

        runner = uvloop.run
    n = args.messages
    tick, now = NextTickExecutor(), ImmediateExecutor()
    rows = [
        ("baseline: task per message, next-tick", lambda: run_baseline(n)),
        ("dispatcher, 1 stream, next-tick", lambda: run_dispatcher(n, 1, False, tick)),
        ("dispatcher, 1 stream, next-tick, prometheus", lambda: run_dispatcher(n, 1, True, tick)),
        ("dispatcher, 3 streams, next-tick, prometheus", lambda: run_dispatcher(n, 3, True, tick)),
        ("dispatcher, 1 stream, immediate, prometheus", lambda: run_dispatcher(n, 1, True, now)),
    ]
    loop = "uvloop" if args.uvloop else "asyncio"
    print(f"{n} messages, {loop}, best of {args.repeats}; msg per CPU-second (wall msg/s)")
    baseline = 0.0
    for label, make in rows:
        cpu, wall = best_of(args.repeats, lambda make=make: runner(make()))  # type: ignore[misc]
        baseline = baseline or cpu
        print(f"  {label:<46} {cpu:>8,.0f}/cpu-s  x{cpu / baseline:.2f}  ({wall:,.0f}/s wall)")


if __name__ == "__main__":
    main()
