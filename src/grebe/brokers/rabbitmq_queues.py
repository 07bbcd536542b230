"""RabbitMQ queues as the config declares them, for `grebe topics`.

A stream queue is durable with `x-max-priority: rabbitmq.max_priority`; the dead-letter
queue is durable without arguments. RabbitMQ cannot report a queue's arguments over
AMQP, so `inspect_queues` asks twice: a passive declare says whether the queue exists
(and how many messages are ready), and, if it does, a declare with grebe's arguments on
a throwaway channel says whether they match (an existing queue with the same arguments
is left as it is; a mismatch answers PRECONDITION_FAILED, which names the argument).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aio_pika.abc import AbstractConnection
from aio_pika.exceptions import AMQPError, ChannelNotFoundEntity, ChannelPreconditionFailed

from grebe.brokers.rabbitmq import _connect, declaration_mismatch, stream_queue_arguments
from grebe.config import RabbitMQConfig
from grebe.errors import BrokerError

_ERRORS = (AMQPError, OSError, ConnectionError, asyncio.TimeoutError)


@dataclass(frozen=True)
class QueueSpec:
    name: str
    role: str  # "input" (a stream queue) or "dead-letters"
    arguments: dict[str, Any]


@dataclass(frozen=True)
class QueueState:
    spec: QueueSpec
    exists: bool
    ready: int | None = None  # messages ready in it
    mismatch: str | None = None  # why grebe's declaration is refused, with the fix

    def differences(self) -> list[str]:
        if not self.exists:
            return ["missing"]
        return [self.mismatch] if self.mismatch else []


def queue_specs(config: RabbitMQConfig, inputs: Sequence[str], dead_letters: str
                ) -> list[QueueSpec]:
    specs = [QueueSpec(q, "input", stream_queue_arguments(config.max_priority))
             for q in dict.fromkeys(inputs)]
    return [*specs, QueueSpec(dead_letters, "dead-letters", {})]


async def inspect_queues(config: RabbitMQConfig, specs: Sequence[QueueSpec]
                         ) -> list[QueueState]:
    connection = await _connect(config.url)
    try:
        return [await _inspect(connection, config, spec) for spec in specs]
    except _ERRORS as exc:
        raise BrokerError(f"inspecting RabbitMQ queues failed: {exc}") from exc
    finally:
        await connection.close()


async def _inspect(connection: AbstractConnection, config: RabbitMQConfig, spec: QueueSpec
                   ) -> QueueState:
    # Each probe on its own channel: the broker closes a channel on a failed declare.
    async with connection.channel() as channel:
        try:
            queue = await channel.declare_queue(spec.name, passive=True)
        except ChannelNotFoundEntity:
            return QueueState(spec, exists=False)
        ready = int(queue.declaration_result.message_count or 0)
    async with connection.channel() as channel:
        try:
            await channel.declare_queue(spec.name, durable=True, arguments=spec.arguments)
        except ChannelPreconditionFailed as exc:
            error = declaration_mismatch(spec.name, config.max_priority, exc)
            return QueueState(spec, exists=True, ready=ready, mismatch=str(error))
    return QueueState(spec, exists=True, ready=ready)


async def declare_queues(config: RabbitMQConfig, specs: Sequence[QueueSpec]) -> None:
    """Declare every queue (a no-op for those already there with the same arguments);
    a mismatch raises ConfigError naming the queue, the argument and the fix."""
    connection = await _connect(config.url)
    try:
        for spec in specs:
            async with connection.channel() as channel:
                try:
                    await channel.declare_queue(spec.name, durable=True,
                                                arguments=spec.arguments)
                except ChannelPreconditionFailed as exc:
                    raise declaration_mismatch(spec.name, config.max_priority, exc) from exc
    except _ERRORS as exc:
        raise BrokerError(f"declaring RabbitMQ queues failed: {exc}") from exc
    finally:
        await connection.close()
