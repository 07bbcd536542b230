"""The RabbitMQ broker (brokers/rabbitmq*.py): its settings section and its backend.

A queue broker takes input only (`carries_output=False`): retries are its own delay
queues, dead letters its dead-letter queue. aio_pika is imported by the builders only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from pydantic import Field

from grebe.brokers.backend import BrokerBackend, BrokerSettings, ProducerRole, TopicRow

if TYPE_CHECKING:
    from grebe.brokers.dead_letters import DeadLetterAccess
    from grebe.brokers.rabbitmq_queues import QueueSpec
    from grebe.config import GrebeConfig, StreamConfig
    from grebe.core.source import Producer, Source

NAME = "rabbitmq"


class RabbitMQConfig(BrokerSettings):
    url: str = "amqp://guest:guest@127.0.0.1:5672/"
    prefetch: int = Field(default=2, ge=1)
    max_priority: int = Field(default=3, ge=0, le=255)


def _settings(config: GrebeConfig) -> RabbitMQConfig:
    return cast(RabbitMQConfig, BACKEND.settings_of(config))


def _source(stream: StreamConfig, config: GrebeConfig) -> Source:
    from grebe.brokers.rabbitmq import RabbitSource

    return RabbitSource(
        stream.name, _settings(config), queue=stream.topic,
        dead_letter_queue=config.dispatcher.dead_letter_topic,
        backoff_base_s=config.dispatcher.backoff_base_s,
        backoff_max_s=config.dispatcher.backoff_max_s,
    )


def _producer(config: GrebeConfig, topic: str, role: ProducerRole) -> Producer:
    """Declares the queue at start (a queue declared with other arguments fails there);
    each message gets the priority of its poster's tier."""
    from grebe.brokers.rabbitmq_producer import RabbitProducer

    return RabbitProducer(_settings(config), queues=[topic])


def _dead_letters(config: GrebeConfig) -> DeadLetterAccess:
    from grebe.brokers.rabbitmq_dlq import RabbitDeadLetters

    return RabbitDeadLetters(_settings(config), config.dispatcher.dead_letter_topic)


def _specs(config: GrebeConfig) -> list[QueueSpec]:
    """Every RabbitMQ stream's queue (with `x-max-priority`) and the dead-letter queue."""
    from grebe.brokers.rabbitmq_queues import queue_specs

    inputs = [s.topic for s in config.streams if s.broker == NAME]
    if not inputs:
        return []
    return queue_specs(_settings(config), inputs, config.dispatcher.dead_letter_topic)


async def _inspect_topics(config: GrebeConfig) -> list[TopicRow]:
    if not (specs := _specs(config)):
        return []
    from grebe.brokers.rabbitmq_queues import inspect_queues

    rows = []
    for queue in await inspect_queues(_settings(config), specs):
        wanted = ", ".join(f"{k}={v}" for k, v in queue.spec.arguments.items())
        rows.append(TopicRow(
            NAME, queue.spec.name, queue.spec.role, f"durable {wanted}".strip(),
            f"{queue.ready} ready" if queue.exists else "-", tuple(queue.differences()),
        ))
    return rows


async def _create_topics(config: GrebeConfig) -> list[str]:
    """Declare every queue (declaring an existing one is a no-op); created: none named,
    as RabbitMQ does not say which were new."""
    if specs := _specs(config):
        from grebe.brokers.rabbitmq_queues import declare_queues

        await declare_queues(_settings(config), specs)
    return []


BACKEND = BrokerBackend(
    name=NAME, settings=RabbitMQConfig, build_source=_source, build_producer=_producer,
    dead_letters=_dead_letters, carries_output=False, inspect_topics=_inspect_topics,
    create_topics=_create_topics,
)
