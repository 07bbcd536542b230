"""Kafka consume -> process -> produce: grebe against a raw aiokafka loop, same broker.

    scripts/services.sh up kafka
    .venv/bin/python bench/kafka.py [--posts 50000] [--partitions 6] [--uvloop]

One input topic is filled with `--posts` posts once. Then, in one process run, each on
its own consumer group from the start of that topic and with its own output topic:

  raw    the loop one would write by hand: getmany -> send one output record per post
         -> await the batch's deliveries -> commit the batch's offsets. No decode, no
         plans, no out-of-order tracking.
  grebe noop   KafkaSource -> Dispatcher -> InlineExecutor -> PlanMaster running the
         built-in no-op plan (six tasks); commits through the OffsetTracker. Produces
         nothing: the runtime's own cost on a real broker.
  grebe relay  the same, but the plan's last task publishes one output record per post
         (KafkaProducer, acks=all, idempotent), i.e. the same work as `raw`.

Every producer is idempotent with acks=all, so they pay the same broker cost. The
process tunes its garbage collector as `grebe run` does (BENCH_TUNE_GC=0 to skip). Printed:
posts/s of each (wall clock, from the first poll to the last post finished and
committed) and each grebe figure over raw.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from grebe.brokers.kafka import KafkaProducer, KafkaSource, create_topic, delete_topic
from grebe.codec import encode
from grebe.config import KafkaConfig
from grebe.core.dispatcher import Dispatcher, Stream
from grebe.core.engine_process import tune_gc
from grebe.core.executor import InlineExecutor
from grebe.core.plan import Plan
from grebe.core.planmaster import PlanMaster
from grebe.core.settings import DispatcherSettings, StreamSettings
from grebe.core.source import Message, Outcome
from grebe.core.task import TaskContext
from grebe.flows.basic import noop_plan
from grebe.types import Envelope, Post, User

BOOTSTRAP = "127.0.0.1:9092"


async def fill(topic: str, posts: int) -> None:
    producer = KafkaProducer(KafkaConfig(bootstrap_servers=BOOTSTRAP), linger_ms=20)
    await producer.start()
    try:
        for start in range(0, posts, 5000):
            await producer.publish_many(topic, [
                (f"u{i % 1000}".encode(), encode(Envelope(
                    post=Post(id=str(i), author_id=f"u{i % 1000}", text=f"post number {i}"),
                    user=User(id=f"u{i % 1000}"))))
                for i in range(start, min(posts, start + 5000))
            ])
    finally:
        await producer.stop()


async def committed_total(group: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        return sum(m.offset for m in (await admin.list_consumer_group_offsets(group)).values())
    finally:
        await admin.close()


async def run_raw(topic: str, output: str, posts: int) -> float:
    group = f"bench-raw-{uuid.uuid4().hex[:6]}"
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=BOOTSTRAP, group_id=group,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                max_poll_records=500)
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, enable_idempotence=True,
                                acks="all", linger_ms=5)
    await consumer.start()
    await producer.start()
    done = 0
    started = 0.0
    try:
        while done < posts:
            batches = await consumer.getmany(timeout_ms=1000, max_records=500)
            if not started:
                started = time.perf_counter()
            deliveries = []
            for records in batches.values():
                for record in records:
                    deliveries.append(await producer.send(output, record.value[:64],
                                                          key=record.key))
            await asyncio.gather(*deliveries)
            if batches:
                await consumer.commit()
            done += len(deliveries)
        return posts / (time.perf_counter() - started)
    finally:
        await producer.stop()
        await consumer.stop()


async def run_grebe(topic: str, output: str | None, posts: int) -> float:
    group = f"bench-grebe-{uuid.uuid4().hex[:6]}"
    config = KafkaConfig(bootstrap_servers=BOOTSTRAP)
    producer = KafkaProducer(config)
    await producer.start()

    async def noop(ctx: TaskContext) -> None:
        return None

    async def publish(ctx: TaskContext) -> None:
        assert output is not None  # the relay plan is built only with an output topic
        await producer.publish(output, ctx.payload.post.author_id.encode(),
                               ctx.payload.post.id.encode())

    if output is None:
        plan = noop_plan()
    else:
        plan = Plan("relay", {"parse": noop, "score": noop, "publish": publish},
                    {"score": ["parse"], "publish": ["score"]}, eligibility="relay")
    executor = InlineExecutor(PlanMaster([plan]), concurrency=1024)
    source = KafkaSource("posts", config, topic=topic, group=group)
    first_poll: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    poll = source.poll

    async def timed_poll(max_messages: int, timeout: float) -> list[Message]:  # noqa: ASYNC109
        messages = await poll(max_messages, timeout)
        if messages and not first_poll.done():
            first_poll.set_result(time.perf_counter())
        return messages

    all_acked = asyncio.Event()
    ack, acked = source.ack, [0]

    async def counted_ack(message: Message, outcome: Outcome, **kw: Any) -> None:
        await ack(message, outcome, **kw)
        acked[0] += 1
        if acked[0] >= posts:
            all_acked.set()

    source.poll = timed_poll  # type: ignore[method-assign]
    source.ack = counted_ack  # type: ignore[method-assign]
    await executor.start()
    await source.start()
    dispatcher = Dispatcher(
        [Stream(source, StreamSettings(name="posts", eligibilities=[plan.eligibility]))],
        executor,
        DispatcherSettings(max_in_flight=2048, poll_batch=500),
    )
    run = asyncio.create_task(dispatcher.run())
    try:
        # The first poll starts the clock; the last post's commit stops it.
        started = await first_poll
        await all_acked.wait()
        await source.commit()
        elapsed = time.perf_counter() - started
    finally:
        await dispatcher.stop(5)
        await run
        await source.stop()
        await executor.stop()
        await producer.stop()
    assert await committed_total(group) == posts, "not every offset was committed"
    return posts / elapsed


async def main(posts: int, partitions: int) -> None:
    # As `grebe run` does once started (core.engine.tune_gc), for all three loops alike:
    # without it the collector walks every suspended post's frames (~1,000 in flight)
    # over and over, which cost the relay plan most of its time.
    if os.environ.get("BENCH_TUNE_GC", "1") == "1":
        tune_gc()
    tag = uuid.uuid4().hex[:6]
    topic, raw_out, grebe_out = f"bench-in-{tag}", f"bench-raw-{tag}", f"bench-grebe-{tag}"
    for name in (topic, raw_out, grebe_out):
        await create_topic(BOOTSTRAP, name, partitions)
    try:
        await fill(topic, posts)
        raw = await run_raw(topic, raw_out, posts)
        noop = await run_grebe(topic, None, posts)
        relay = await run_grebe(topic, grebe_out, posts)
    finally:
        for name in (topic, raw_out, grebe_out):
            await delete_topic(BOOTSTRAP, name)
    print(f"posts {posts}, partitions {partitions}, Kafka at {BOOTSTRAP}")
    print(f"  raw aiokafka consume->produce      : {raw:9.0f} posts/s")
    print(f"  grebe no-op plan (consume, commit) : {noop:9.0f} posts/s  {noop / raw:5.2f}x raw")
    print(f"  grebe relay plan (consume->produce): {relay:9.0f} posts/s  {relay / raw:5.2f}x raw")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--posts", type=int, default=50_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--uvloop", action="store_true")
    args = parser.parse_args()
    if args.uvloop:
        import uvloop

        uvloop.run(main(args.posts, args.partitions))
    else:
        asyncio.run(main(args.posts, args.partitions))
