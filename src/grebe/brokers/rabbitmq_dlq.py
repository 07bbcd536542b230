"""Dead letters on RabbitMQ: the dead-letter queue, replayed by basic.get + ack.

A queue hands each message to one consumer at a time, so replay is exclusive by
construction: a replay takes a dead letter with `basic.get` (unacked: no other replay
can take it), publishes the original to its stream's queue with `mandatory` set and a
publisher confirm (an unroutable queue name fails loudly instead of dropping it), and
only then acks the dead letter. Records it skips stay unacked until the replay ends and
then return to the queue. A replay killed between the confirm and the ack leaves the
dead letter queued, so a later replay may send it again (at least once, never lost).

Listing takes up to `limit` messages unacked and closes the channel, which puts them
back; RabbitMQ cannot show a queue without taking from it. Replayed dead letters are
gone from the queue, so `replayed` is always False here.
"""

from __future__ import annotations

import asyncio

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractQueue
from aio_pika.exceptions import AMQPError

from grebe.brokers.dead_letters import Replay, ReplayReport, Router, StoredDeadLetter
from grebe.brokers.rabbitmq import _safe
from grebe.brokers.rabbitmq_producer import envelope_priority
from grebe.config import RabbitMQConfig
from grebe.errors import BrokerError

_ERRORS = (AMQPError, OSError, ConnectionError, asyncio.TimeoutError)


class RabbitDeadLetters:
    """DeadLetterAccess on one RabbitMQ dead-letter queue."""

    def __init__(self, config: RabbitMQConfig, queue: str) -> None:
        self._config = config
        self._queue = queue

    async def _open(self) -> tuple[AbstractConnection, AbstractChannel, AbstractQueue]:
        try:
            connection = await aio_pika.connect(self._config.url)
        except _ERRORS as exc:
            raise BrokerError(f"cannot connect to RabbitMQ at {_safe(self._config.url)}: "
                              f"{exc}") from exc
        try:
            channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
            queue = await channel.declare_queue(self._queue, passive=True)
        except _ERRORS as exc:
            await connection.close()
            raise BrokerError(
                f"RabbitMQ dead-letter queue {self._queue!r} is not there ({exc}); it is "
                "declared when a RabbitMQ stream starts"
            ) from exc
        return connection, channel, queue

    async def peek(self, limit: int) -> list[StoredDeadLetter]:
        """The first `limit` dead letters in the queue (oldest first), put back after."""
        connection, _channel, queue = await self._open()
        found: list[StoredDeadLetter] = []
        try:
            while len(found) < limit:
                message = await queue.get(no_ack=False, fail=False)
                if message is None:
                    break
                found.append(StoredDeadLetter(0, len(found), message.body))
        except _ERRORS as exc:
            raise BrokerError(f"reading RabbitMQ queue {self._queue!r} failed: {exc}") from exc
        finally:
            await connection.close()  # the broker requeues every unacked message
        return found

    async def replay(self, route: Router, limit: int | None = None) -> ReplayReport:
        connection, channel, queue = await self._open()
        report = ReplayReport()
        try:
            # Only what was there at start: skipped records stay held (unacked) until the
            # end, and anything dead-lettered meanwhile waits for the next replay.
            ready = int(queue.declaration_result.message_count or 0)
            for number in range(ready):
                if limit is not None and report.replayed >= limit:
                    break
                message = await queue.get(no_ack=False, fail=False)
                if message is None:
                    break  # another replay took the rest
                decision = route(message.body)
                if isinstance(decision, str):
                    report.skip(f"message {number}", decision)
                    continue
                await _publish(channel, decision, self._config.max_priority)
                await message.ack()
                report.replayed += 1
        except _ERRORS as exc:
            raise BrokerError(f"replay from RabbitMQ queue {self._queue!r} stopped after "
                              f"{report.replayed}: {exc}") from exc
        finally:
            await connection.close()
        return report


async def _publish(channel: AbstractChannel, replay: Replay, max_priority: int) -> None:
    # The dead letter does not keep the delivery's priority; the poster's tier gives it.
    message = aio_pika.Message(
        replay.value, priority=envelope_priority(replay.value, max_priority),
        message_id=replay.key.decode("utf-8", "replace") if replay.key else None,
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
    )
    try:
        await channel.default_exchange.publish(message, routing_key=replay.topic, mandatory=True)
    except aio_pika.exceptions.DeliveryError as exc:
        raise BrokerError(
            f"RabbitMQ returned the replay to queue {replay.topic!r} as unroutable (does "
            "the queue exist? a RabbitMQ stream declares it on start)"
        ) from exc
