"""A Producer on RabbitMQ stream queues, for `grebe ingest` into a RabbitMQ stream.

RabbitMQ's default exchange drops a message whose queue does not exist, without an
error. So this producer declares each queue before its first publish, with the very
arguments the stream's source declares (`stream_queue_arguments`), and publishes with
`mandatory` and publisher confirms: a message that still cannot be routed fails the
publish. Each message gets the priority of its poster's tier, like RabbitPublisher.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractConnection
from aio_pika.exceptions import AMQPError, DeliveryError

from grebe.brokers.rabbitmq import _declare_main, open_confirming, tier_priority
from grebe.codec import decode_envelope
from grebe.config import RabbitMQConfig
from grebe.errors import BrokerError, GrebeError

_ERRORS = (AMQPError, OSError, ConnectionError, asyncio.TimeoutError)


def envelope_priority(value: bytes, max_priority: int) -> int:
    """The priority of an encoded envelope by its user's tier (unreadable: 0)."""
    try:
        user = decode_envelope(value).user
    except (GrebeError, ValueError, RecursionError):
        return 0
    return min(tier_priority(user.tier if user else None), max_priority)


class RabbitProducer:
    """Producer protocol on RabbitMQ: `topic` is a stream queue's name."""

    def __init__(self, config: RabbitMQConfig, queues: Sequence[str] = ()) -> None:
        self._config = config
        self._queues = list(queues)  # declared at start: a mismatch fails there, not later
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._declared: set[str] = set()

    async def start(self) -> None:
        self._connection, self._channel = await open_confirming(self._config, self._queues)
        self._declared.update(self._queues)

    async def stop(self) -> None:
        if self._connection is not None:
            connection, self._connection, self._channel = self._connection, None, None
            await connection.close()

    async def publish(self, topic: str, key: bytes | None, value: bytes) -> None:
        await self.publish_many(topic, [(key, value)])

    async def publish_many(self, topic: str, records: Sequence[tuple[bytes | None, bytes]]
                           ) -> None:
        """Returns once the broker confirmed every record."""
        channel = self._channel
        if channel is None:
            raise BrokerError("RabbitProducer used before start()")
        if topic not in self._declared:
            await _declare_main(channel, topic, self._config.max_priority)
            self._declared.add(topic)
        try:
            await asyncio.gather(*(
                channel.default_exchange.publish(aio_pika.Message(
                    value, priority=envelope_priority(value, self._config.max_priority),
                    message_id=key.decode("utf-8", "replace") if key else None,
                    delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                ), routing_key=topic, mandatory=True)
                for key, value in records
            ))
        except DeliveryError as exc:
            raise BrokerError(f"RabbitMQ returned messages to queue {topic!r} as "
                              "unroutable (was it deleted meanwhile?)") from exc
        except _ERRORS as exc:
            raise BrokerError(f"publish to RabbitMQ queue {topic!r} failed: {exc}") from exc
