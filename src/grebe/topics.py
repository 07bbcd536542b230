"""`grebe topics`: the topics and queues the config wants, beside what the brokers have.

Kafka: every Kafka stream's input topic, the dead-letter topic (when a stream is on
Kafka) and the output topic (when `output.broker` is kafka), each with its declared
partitions and replication factor (`kafka.topics.<name>`, else the `kafka.*`
defaults). RabbitMQ: every RabbitMQ stream's queue (with `x-max-priority`) and the
dead-letter queue. The local log creates its topics on first use, so it has nothing to
declare.

`list` shows each one, `check` also fails when anything differs (missing, other
partitions or replication, other queue arguments), `create` creates what is missing.
An existing Kafka topic is never altered (partitions can only grow, and that moves
keys between partitions): `check` names the difference and the operator decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from grebe.config import GrebeConfig

if TYPE_CHECKING:  # imported lazily: a config without Kafka never loads aiokafka
    from grebe.brokers.kafka_topics import TopicSpec
    from grebe.brokers.rabbitmq_queues import QueueSpec


@dataclass(frozen=True)
class TopicRow:
    broker: str
    name: str
    role: str  # input, output, dead-letters
    wanted: str  # the declared shape, in words
    found: str  # what the broker has, in words ("-" if missing)
    differences: tuple[str, ...]


def _kafka_specs(config: GrebeConfig) -> list[TopicSpec]:
    from grebe.brokers.kafka_topics import topic_spec

    kafka = config.kafka
    specs = [topic_spec(kafka, s.topic, "input") for s in config.streams if s.broker == "kafka"]
    if specs:
        specs.append(topic_spec(kafka, config.dispatcher.dead_letter_topic, "dead-letters"))
    if config.output.broker == "kafka":
        specs.append(topic_spec(kafka, config.output.topic, "output"))
    unique = {spec.name: spec for spec in reversed(specs)}  # first declaration wins
    return [unique[name] for name in dict.fromkeys(s.name for s in specs)]


def _rabbit_specs(config: GrebeConfig) -> list[QueueSpec]:
    from grebe.brokers.rabbitmq_queues import queue_specs

    inputs = [s.topic for s in config.streams if s.broker == "rabbitmq"]
    if not inputs:
        return []
    return queue_specs(config.rabbitmq, inputs, config.dispatcher.dead_letter_topic)


async def topic_rows(config: GrebeConfig) -> list[TopicRow]:
    """Every declared topic and queue with what its broker has."""
    rows: list[TopicRow] = []
    if kafka_specs := _kafka_specs(config):
        from grebe.brokers.kafka_topics import inspect_topics

        for state in await inspect_topics(config.kafka, kafka_specs):
            spec = state.spec
            found = (f"{state.partitions} partitions, replication {state.replication_factor}"
                     if state.exists else "-")
            rows.append(TopicRow(
                "kafka", spec.name, spec.role,
                f"{spec.partitions} partitions, replication {spec.replication_factor}",
                found, tuple(state.differences()),
            ))
    if rabbit_specs := _rabbit_specs(config):
        from grebe.brokers.rabbitmq_queues import inspect_queues

        for queue in await inspect_queues(config.rabbitmq, rabbit_specs):
            wanted = ", ".join(f"{k}={v}" for k, v in queue.spec.arguments.items())
            rows.append(TopicRow(
                "rabbitmq", queue.spec.name, queue.spec.role, f"durable {wanted}".strip(),
                f"{queue.ready} ready" if queue.exists else "-", tuple(queue.differences()),
            ))
    return rows


async def create_topics(config: GrebeConfig) -> list[str]:
    """Create every missing Kafka topic (inputs included: this is the explicit step) and
    declare every RabbitMQ queue. Returns the Kafka topics created."""
    created: list[str] = []
    if kafka_specs := _kafka_specs(config):
        from grebe.brokers.kafka_topics import create_missing, inspect_topics

        created = await create_missing(config.kafka,
                                       await inspect_topics(config.kafka, kafka_specs))
    if rabbit_specs := _rabbit_specs(config):
        from grebe.brokers.rabbitmq_queues import declare_queues

        await declare_queues(config.rabbitmq, rabbit_specs)
    return created
