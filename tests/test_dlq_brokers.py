"""`grebe dlq` on every broker (real servers of scripts/services.sh): list, replay to the
original stream, and exclusive replay (two at once send each dead letter exactly once)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter

import aio_pika
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from typer.testing import CliRunner

from grebe.brokers.factory import local_log
from grebe.brokers.kafka import KafkaProducer, create_topic, delete_topic, topic_partitions
from grebe.cli import app
from grebe.codec import encode
from grebe.commands.dlq import list_dead_letters, replay
from grebe.config import GrebeConfig, StreamConfig, load_config
from grebe.errors import BrokerError
from grebe.types import DeadLetter, Envelope, Post, User


def _letter(n: int, source: str = "posts") -> DeadLetter:
    return DeadLetter(source=source, reason="max_attempts", attempts=3, last_error="boom",
                      original=f"original-{n}".encode(), key=f"k{n}".encode(), offset=n)


async def _replay_twice_at_once(config: GrebeConfig) -> int:
    first, second = await asyncio.gather(replay(config), replay(config))
    return first.replayed + second.replayed


# --- local log ------------------------------------------------------------------------------


async def test_two_concurrent_local_replays_send_each_dead_letter_once(tmp_path) -> None:
    config = load_config(data_dir=tmp_path, streams=[{"name": "posts", "topic": "in"}])
    log = local_log(config)
    await log.open()
    await log.topic("dead-letters", 1)
    await log.append("dead-letters", [(None, encode(_letter(n))) for n in range(1200)])
    await log.close()

    assert await _replay_twice_at_once(config) == 1200

    log = local_log(config)
    await log.open()
    records = await log.read("in", [(p, 0) for p in range(4)], 5000)
    await log.close()
    counts = Counter(r.value for r in records)
    assert len(counts) == 1200 and set(counts.values()) == {1}


async def test_local_replay_limit_sends_the_oldest_n_and_the_rest_later(tmp_path) -> None:
    config = load_config(data_dir=tmp_path, streams=[{"name": "posts", "topic": "in"}])
    log = local_log(config)
    await log.open()
    await log.topic("dead-letters", 1)
    await log.append("dead-letters", [(None, encode(_letter(n))) for n in range(5)])
    await log.close()
    assert (await replay(config, limit=2)).replayed == 2
    assert [e.replayed for e in await list_dead_letters(config)] == [True] * 2 + [False] * 3
    assert (await replay(config)).replayed == 3


# --- Kafka ----------------------------------------------------------------------------------


@pytest.mark.integration
async def test_kafka_dlq_lists_and_replays_exactly_once_with_two_replays(
    kafka_bootstrap: str,
) -> None:
    run = uuid.uuid4().hex[:10]
    dead_topic, input_topic = f"dlq-{run}", f"in-{run}"
    await create_topic(kafka_bootstrap, dead_topic, 2)
    await create_topic(kafka_bootstrap, input_topic, 1)
    config = load_config(
        streams=[{"name": "posts", "broker": "kafka", "topic": input_topic}],
        dispatcher={"dead_letter_topic": dead_topic},
        kafka={"bootstrap_servers": kafka_bootstrap, "session_timeout_ms": 6000},
    )
    total = 400
    producer = KafkaProducer(config.kafka)
    await producer.start()
    try:
        await producer.publish_many(dead_topic, [
            (f"k{n}".encode(), encode(_letter(n))) for n in range(total)
        ] + [(None, b"not a dead letter"), (None, encode(_letter(-1, source="gone")))])
    finally:
        await producer.stop()
    try:
        listed = await list_dead_letters(config, limit=1000)
        assert len(listed) == total + 2 and not any(e.replayed for e in listed)
        assert sum(e.record is None for e in listed) == 1

        first, second = await asyncio.gather(replay(config), replay(config))
        assert first.replayed + second.replayed == total
        assert first.skipped + second.skipped == 2

        values = await _read_all(kafka_bootstrap, input_topic)
        assert Counter(values) == Counter(f"original-{n}".encode() for n in range(total))
        assert all(e.replayed for e in await list_dead_letters(config, limit=1000))
        assert (await replay(config)).replayed == 0  # nothing left: a third run sends none

        # A stream topic that does not exist stops the replay; it is not auto-created.
        await producer.start()
        await producer.publish(dead_topic, None, encode(_letter(1, source="other")))
        await producer.stop()
        missing = f"missing-{run}"
        elsewhere = config.model_copy(update={"streams": [
            *config.streams, StreamConfig(name="other", broker="kafka", topic=missing)]})
        with pytest.raises(BrokerError, match=missing):
            await replay(elsewhere)
        assert await topic_partitions(kafka_bootstrap, [missing]) == {}
    finally:
        await delete_topic(kafka_bootstrap, dead_topic)
        await delete_topic(kafka_bootstrap, input_topic)


@pytest.mark.integration
async def test_kafka_replay_joined_midway_takes_over_without_repeating(
    kafka_bootstrap: str,
) -> None:
    """The second replay joins while the first is sending: the rebalance moves
    partitions only after the first committed what it sent."""
    import time

    from grebe.brokers.dead_letters import Replay
    from grebe.brokers.kafka_dlq import KafkaDeadLetters

    run = uuid.uuid4().hex[:10]
    dead_topic, input_topic = f"dlq-{run}", f"in-{run}"
    await create_topic(kafka_bootstrap, dead_topic, 2)
    await create_topic(kafka_bootstrap, input_topic, 1)
    config = load_config(kafka={"bootstrap_servers": kafka_bootstrap,
                                "session_timeout_ms": 6000})
    total = 400
    producer = KafkaProducer(config.kafka)
    await producer.start()
    await producer.publish_many(dead_topic, [(f"k{n}".encode(), f"v{n}".encode())
                                             for n in range(total)])
    await producer.stop()

    routed = 0
    under_way = asyncio.Event()  # the first replay has sent an eighth

    def slow_route(raw: bytes) -> Replay:
        nonlocal routed
        routed += 1
        if routed >= total // 8:
            under_way.set()
        time.sleep(0.01)  # a replay that takes a while, so the second one lands midway
        return Replay(input_topic, None, raw)

    try:
        access = KafkaDeadLetters(config.kafka, dead_topic)
        first = asyncio.create_task(access.replay(slow_route))
        async with asyncio.timeout(60):
            await under_way.wait()
        second = await KafkaDeadLetters(config.kafka, dead_topic).replay(slow_route)
        done = await first
        assert done.replayed + second.replayed == total
        values = await _read_all(kafka_bootstrap, input_topic)
        assert Counter(values) == Counter(f"v{n}".encode() for n in range(total))
    finally:
        await delete_topic(kafka_bootstrap, dead_topic)
        await delete_topic(kafka_bootstrap, input_topic)


async def _read_all(bootstrap: str, topic: str) -> list[bytes]:
    count = (await topic_partitions(bootstrap, [topic]))[topic]
    tps = [TopicPartition(topic, p) for p in range(count)]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        values: list[bytes] = []
        async with asyncio.timeout(30):
            while sum(ends.values()) > len(values):
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    values.extend(r.value for r in records)
        return values
    finally:
        await consumer.stop()


# --- RabbitMQ -------------------------------------------------------------------------------


@pytest.mark.integration
async def test_rabbitmq_dlq_lists_and_replays_exactly_once_with_two_replays(
    rabbit_url: str,
) -> None:
    run = uuid.uuid4().hex[:10]
    dead_queue, input_queue = f"dlq-{run}", f"in-{run}"
    config = load_config(
        streams=[{"name": "posts", "broker": "rabbitmq", "topic": input_queue}],
        dispatcher={"dead_letter_topic": dead_queue}, rabbitmq={"url": rabbit_url},
    )
    total = 300
    connection = await aio_pika.connect(rabbit_url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        await channel.declare_queue(input_queue, durable=True,
                                    arguments={"x-max-priority": config.rabbitmq.max_priority})
        await channel.declare_queue(dead_queue, durable=True)
        for body in [encode(_letter(n)) for n in range(total)] + [b"junk"]:
            await channel.default_exchange.publish(aio_pika.Message(body), routing_key=dead_queue)
        try:
            listed = await list_dead_letters(config, limit=10)
            assert len(listed) == 10 and listed[0].record is not None
            assert listed[0].record.original == b"original-0"
            assert len(await list_dead_letters(config, limit=1000)) == total + 1  # put back

            first, second = await asyncio.gather(replay(config), replay(config))
            assert first.replayed + second.replayed == total

            queue = await channel.declare_queue(input_queue, passive=True)
            bodies = []
            while (message := await queue.get(fail=False)) is not None:
                bodies.append(message.body)
                assert message.message_id is not None
                await message.ack()
            assert Counter(bodies) == Counter(f"original-{n}".encode() for n in range(total))
            left = await list_dead_letters(config)
            assert [e.error is not None for e in left] == [True]  # the unreadable one stays
        finally:
            await channel.queue_delete(dead_queue)
            await channel.queue_delete(input_queue)


async def _rabbit(url: str, publish_to: str | None = None, delete: str | None = None) -> None:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        if publish_to:
            await channel.declare_queue(publish_to, durable=True)
            await channel.default_exchange.publish(aio_pika.Message(encode(_letter(1))),
                                                   routing_key=publish_to)
        if delete:
            await channel.queue_delete(delete)


@pytest.mark.integration
def test_rabbitmq_replay_to_a_missing_queue_fails_and_keeps_the_dead_letter(
    rabbit_url: str,
) -> None:
    """An unroutable replay is a one-line error (exit 1), not a silent drop: the queue's
    default exchange would drop it without `mandatory`."""
    run = uuid.uuid4().hex[:10]
    dead_queue = f"dlq-{run}"
    streams = [{"name": "posts", "broker": "rabbitmq", "topic": f"missing-{run}"}]
    config = load_config(streams=streams, dispatcher={"dead_letter_topic": dead_queue},
                         rabbitmq={"url": rabbit_url})
    asyncio.run(_rabbit(rabbit_url, publish_to=dead_queue))
    try:
        result = CliRunner().invoke(app, ["dlq", "replay"], env={
            "GREBE_STREAMS": json.dumps(streams),
            "GREBE_DISPATCHER__DEAD_LETTER_TOPIC": dead_queue,
            "GREBE_RABBITMQ__URL": rabbit_url,
        })
        assert result.exit_code == 1, result.output
        assert "unroutable" in result.output and "Traceback" not in result.output
        assert len(asyncio.run(list_dead_letters(config))) == 1  # still there
    finally:
        asyncio.run(_rabbit(rabbit_url, delete=dead_queue))


@pytest.mark.integration
async def test_rabbitmq_replay_restores_the_priority_of_the_posters_tier(
    rabbit_url: str,
) -> None:
    run = uuid.uuid4().hex[:10]
    dead_queue, input_queue = f"dlq-{run}", f"in-{run}"
    config = load_config(
        streams=[{"name": "posts", "broker": "rabbitmq", "topic": input_queue}],
        dispatcher={"dead_letter_topic": dead_queue}, rabbitmq={"url": rabbit_url},
    )
    paid = encode(Envelope(post=Post(id="p1", author_id="a", text="hi"),
                           user=User(id="a", tier="paid")))  # type: ignore[arg-type]
    letter = DeadLetter(source="posts", reason="max_attempts", attempts=3, last_error="x",
                        original=paid, key=b"p1")
    connection = await aio_pika.connect(rabbit_url)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue(input_queue, durable=True,
                                    arguments={"x-max-priority": config.rabbitmq.max_priority})
        await channel.declare_queue(dead_queue, durable=True)
        await channel.default_exchange.publish(aio_pika.Message(encode(letter)),
                                               routing_key=dead_queue)
        try:
            assert (await replay(config)).replayed == 1
            queue = await channel.declare_queue(input_queue, passive=True)
            message = await queue.get()
            assert (message.body, message.priority, message.message_id) == (paid, 3, "p1")
            await message.ack()
        finally:
            await channel.queue_delete(dead_queue)
            await channel.queue_delete(input_queue)
