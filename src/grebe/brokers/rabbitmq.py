"""RabbitMQ (aio-pika): priority queues for on-demand requests, retries without plugins.

Topology, per stream queue `q` (all durable, declared on start, default exchange):

    q               classic queue, x-max-priority (tiers 0-3; see docs/brokers.md on
                    why not a quorum queue: those collapse priorities to two levels)
    q.retry.<n>     delay queue of attempt n: a message waits there for its own TTL
                    (`expiration`), then is dead-lettered back to q. One queue per attempt
                    keeps delays of a queue alike, so a long delay at the head of a queue
                    (TTLs expire only there) barely holds back the ones behind it.
    <dead letters>  the final dead-letter queue (dispatcher.dead_letter_topic)

Prefetch (qos) is small (default 2) so priority stays strict: a broker can only reorder
what it has not delivered yet. A message is acked after its task finished. On RETRY a
copy with the attempt header incremented goes to the delay queue (publisher-confirmed)
before the original is acked; on DEAD the dead-letter record is stored (confirmed) before
the ack. Delivery is at-least-once: a crash between the two, a consumer killed before
its ack, or an ack on a channel that died (the broker redelivers whatever was unacked on
it; the failed ack raises BrokerError and is logged, never lost silently) all mean a
post may be processed twice. Sinks are idempotent, so it is written once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
from collections.abc import Iterable
from typing import Any

import aio_pika
from aio_pika.abc import (
    AbstractChannel,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustChannel,
    AbstractRobustConnection,
)
from aio_pika.exceptions import (
    AMQPError,
    ChannelInvalidStateError,
    ChannelPreconditionFailed,
    DeliveryError,
)

from grebe import constants as C
from grebe.codec import encode
from grebe.config import RabbitMQConfig
from grebe.core.backoff import Backoff
from grebe.core.source import Message, Outcome
from grebe.errors import BrokerError, ConfigError
from grebe.types import Envelope

log = logging.getLogger(__name__)

_CONNECTION_ERRORS = (AMQPError, OSError, ConnectionError, asyncio.TimeoutError)
# An ack on a delivery whose channel died (the connection dropped and connect_robust
# reopened a new one) raises ChannelInvalidStateError, a RuntimeError, not an AMQPError.
_ACK_ERRORS = (*_CONNECTION_ERRORS, ChannelInvalidStateError)


def tier_priority(tier: str | None) -> int:
    """The queue priority of a request by its poster's tier (unknown or none: 0)."""
    return C.TIER_PRIORITY.get(tier or "", 0)


def retry_queue_name(queue: str, attempt: int) -> str:
    return f"{queue}{C.RABBIT_RETRY_SUFFIX}.{attempt}"


async def _connect(url: str) -> AbstractRobustConnection:
    try:
        return await aio_pika.connect_robust(url)
    except _CONNECTION_ERRORS as exc:
        raise BrokerError(f"cannot connect to RabbitMQ at {_safe(url)}: {exc}") from exc


async def open_confirming(
    config: RabbitMQConfig, queues: Iterable[str],
) -> tuple[AbstractRobustConnection, AbstractRobustChannel]:
    """A connection and a channel with publisher confirms that refuses what it cannot
    route (on_return_raises + mandatory: a message whose queue was deleted fails its
    publish instead of vanishing in the default exchange), with `queues` declared as the
    sources declare them. Whatever step fails, the connection is closed again."""
    connection = await _connect(config.url)
    try:
        try:
            channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        except _CONNECTION_ERRORS as exc:
            raise BrokerError(f"cannot open a RabbitMQ channel: {exc}") from exc
        for queue in queues:
            await _declare_main(channel, queue, config.max_priority)
    except BaseException:
        await connection.close()
        raise
    return connection, channel  # type: ignore[return-value]


def _safe(url: str) -> str:
    """The URL without its password, for error messages."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = rest.split("@", 1)[1]
    return f"{scheme}{sep}{rest}"


def stream_queue_arguments(max_priority: int) -> dict[str, Any]:
    """The arguments every declaration of a stream queue uses (source, publisher,
    `grebe topics`): RabbitMQ refuses a declaration whose arguments differ."""
    return {C.RABBIT_MAX_PRIORITY_ARG: max_priority}


async def _declare_main(channel: AbstractChannel, queue: str, max_priority: int
                        ) -> AbstractQueue:
    try:
        return await channel.declare_queue(
            queue, durable=True, arguments=stream_queue_arguments(max_priority)
        )
    except ChannelPreconditionFailed as exc:
        raise declaration_mismatch(queue, max_priority, exc) from exc
    except AMQPError as exc:
        raise BrokerError(
            f"cannot declare RabbitMQ queue {queue!r} (x-max-priority={max_priority}): {exc}"
        ) from exc


def declaration_mismatch(queue: str, max_priority: int, exc: BaseException) -> ConfigError:
    """PRECONDITION_FAILED on declare: the queue exists with other arguments (typically
    declared by hand, or by another tool, without x-max-priority). Name it and the fix."""
    text = str(exc)
    # "received the value '3' of type 'byte' but current is none", or
    # "received '3' but current is '5'" (RabbitMQ words it both ways).
    match = re.search(r"inequivalent arg '([^']+)'.*?received (?:the value )?'([^']*)'"
                      r".*?current is (?:the value )?(?:'([^']*)'|(\w+))", text)
    if match is None:
        return ConfigError(f"RabbitMQ queue {queue!r} exists with other arguments than "
                           f"grebe declares ({text})")
    arg, wanted, current = match[1], match[2], match[3] or match[4]
    fix = ("delete the queue (`rabbitmqctl delete_queue " + queue + "`; move its messages "
           "first) and let grebe declare it (`grebe topics create`)")
    if arg == C.RABBIT_MAX_PRIORITY_ARG and match[3] is not None:
        fix += f", or set rabbitmq.max_priority: {current} to match it"
    return ConfigError(
        f"RabbitMQ queue {queue!r} exists with {arg}={current}, but grebe declares "
        f"{arg}={wanted} (rabbitmq.max_priority: {max_priority}); RabbitMQ refuses a "
        f"declaration with different arguments. Fix: {fix}."
    )


class RabbitPublisher:
    """Enqueues requests with the priority of their poster's tier, resolved now (a tier
    change later does not reorder what is already queued)."""

    def __init__(self, config: RabbitMQConfig, queue: str) -> None:
        self._config = config
        self.queue = queue
        self._connection: AbstractRobustConnection | None = None
        self._channel: AbstractRobustChannel | None = None

    async def start(self) -> None:
        self._connection, self._channel = await open_confirming(self._config, [self.queue])

    async def stop(self) -> None:
        if self._connection is not None:
            connection, self._connection, self._channel = self._connection, None, None
            await connection.close()

    async def publish(self, envelope: Envelope, tier: str | None = None) -> int:
        """Enqueue one request; `tier` defaults to the envelope's user's. Returns the
        priority it was given. Returns once the broker confirmed it."""
        if tier is None and envelope.user is not None:
            tier = envelope.user.tier
        priority = min(tier_priority(tier), self._config.max_priority)
        await self.publish_raw(encode(envelope), priority, message_id=envelope.post.id)
        return priority

    async def publish_raw(self, body: bytes, priority: int = 0, *,
                          message_id: str | None = None) -> None:
        if self._channel is None:
            raise BrokerError("RabbitPublisher used before start()")
        message = aio_pika.Message(
            body, priority=priority, message_id=message_id,
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        )
        try:
            await self._channel.default_exchange.publish(
                message, routing_key=self.queue, mandatory=True
            )
        except DeliveryError as exc:
            raise BrokerError(
                f"RabbitMQ returned a message to queue {self.queue!r} as unroutable (was "
                "the queue deleted? restart the publisher, or `grebe topics create`)"
            ) from exc
        except _CONNECTION_ERRORS as exc:
            raise BrokerError(f"publish to RabbitMQ queue {self.queue!r} failed: {exc}") from exc


class RabbitSource:
    """One stream read from one RabbitMQ queue. Retries are the broker's (delay queues)."""

    handles_retry = True

    def __init__(
        self, name: str, config: RabbitMQConfig, *, queue: str,
        dead_letter_queue: str = C.DEFAULT_DEAD_LETTER_TOPIC,
        backoff_base_s: float = C.DEFAULT_BACKOFF_BASE_S,
        backoff_max_s: float = C.DEFAULT_BACKOFF_MAX_S,
        rng: random.Random | None = None,
    ) -> None:
        self.name = name
        self.queue = queue
        self.dead_letter_queue = dead_letter_queue
        self._config = config
        self._backoff = Backoff(backoff_base_s, backoff_max_s, rng or random.Random())
        self._connection: AbstractRobustConnection | None = None
        self._channel: AbstractRobustChannel | None = None
        self._main: AbstractQueue | None = None
        self._consumer_tag: str | None = None
        self._retry_queues: set[int] = set()
        # Deliveries not handed out yet. qos bounds it to `prefetch` per channel; the
        # slack covers deliveries of a channel that died and was reopened meanwhile.
        self._buffer: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue(
            maxsize=2 * config.prefetch
        )
        self._handed_out = 0  # deliveries given to the dispatcher and not finished yet

    async def start(self) -> None:
        self._connection = await _connect(self._config.url)
        try:
            channel: Any = await self._connection.channel(publisher_confirms=True)
            await channel.set_qos(prefetch_count=self._config.prefetch)
            self._channel = channel
            self._main = await _declare_main(channel, self.queue, self._config.max_priority)
            await channel.declare_queue(self.dead_letter_queue, durable=True)
            self._consumer_tag = await self._main.consume(self._buffer.put, no_ack=False)
        except BaseException as exc:
            await self._connection.close()
            self._connection = None
            if isinstance(exc, AMQPError):
                raise BrokerError(f"{self.name}: cannot consume {self.queue!r}: {exc}") from exc
            raise

    async def stop(self) -> None:
        """Stop consuming and close: the broker requeues every unacked delivery."""
        if self._connection is None:
            return
        connection, self._connection = self._connection, None
        if self._main is not None and self._consumer_tag is not None:
            with contextlib.suppress(*_CONNECTION_ERRORS):
                await self._main.cancel(self._consumer_tag)
        await connection.close()

    async def poll(self, max_messages: int, timeout: float) -> list[Message]:  # noqa: ASYNC109
        buffer = self._buffer
        deliveries: list[AbstractIncomingMessage] = []
        if buffer.empty():
            try:
                async with asyncio.timeout(timeout):
                    deliveries.append(await buffer.get())
            except TimeoutError:
                return []
        while len(deliveries) < max_messages and not buffer.empty():
            deliveries.append(buffer.get_nowait())
        return [m for d in deliveries if (m := self._message(d)) is not None]

    def _message(self, delivery: AbstractIncomingMessage) -> Message | None:
        try:
            delivery.channel  # noqa: B018  # raises once its channel is gone
        except ChannelInvalidStateError:
            return None  # its channel died: the broker redelivers it on the new one
        headers = delivery.headers or {}
        attempt = headers.get(C.RABBIT_ATTEMPT_HEADER, 1)
        self._handed_out += 1
        return Message(
            source=self.name, value=delivery.body, partition=0,
            offset=delivery.delivery_tag or 0,
            key=delivery.message_id.encode() if delivery.message_id else None,
            attempt=attempt if isinstance(attempt, int) and attempt >= 1 else 1,
            timestamp=delivery.timestamp.timestamp() if delivery.timestamp else 0.0,
            token=delivery,
        )

    def retry_delay(self, attempt: int) -> float:
        """Seconds before the retry after failed `attempt`: equal jitter, so each retry
        waits at least as long as the longest wait of the one before (until the cap)."""
        ceiling = self._backoff.ceiling(attempt)
        return ceiling / 2 + self._backoff.rng.uniform(0.0, ceiling / 2)

    async def ack(
        self, message: Message, outcome: Outcome, *, reason: str | None = None,
        dead_letter: bytes | None = None,
    ) -> None:
        delivery = message.token
        if not isinstance(delivery, AbstractIncomingMessage):
            raise BrokerError(f"{self.name}: message {message.offset} is not a RabbitMQ delivery")
        # Finished here either way: acked, or (its channel gone) requeued by the broker.
        self._handed_out = max(0, self._handed_out - 1)
        try:
            # Its channel is gone: the broker already requeued it. Check before a RETRY
            # or DEAD publish, so a dead channel does not also leave a copy behind.
            delivery.channel  # noqa: B018  # raises ChannelInvalidStateError
            if outcome is Outcome.RETRY:
                await self._republish_delayed(delivery, message.attempt)
            elif outcome is Outcome.DEAD:
                if dead_letter is None:
                    raise BrokerError(f"{self.name}: DEAD outcome needs the dead_letter record")
                await self._publish(self.dead_letter_queue, aio_pika.Message(
                    dead_letter, message_id=delivery.message_id,
                    delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                ))
            await delivery.ack()
        except _ACK_ERRORS as exc:
            raise BrokerError(
                f"{self.name}: {outcome} of delivery {message.offset} not acked "
                f"({type(exc).__name__}: {exc}); "
                "the broker will redeliver it"
            ) from exc

    async def _republish_delayed(self, delivery: AbstractIncomingMessage, attempt: int) -> None:
        channel = self._started()
        queue = retry_queue_name(self.queue, attempt)
        if attempt not in self._retry_queues:
            await channel.declare_queue(queue, durable=True, arguments={
                "x-dead-letter-exchange": "", "x-dead-letter-routing-key": self.queue,
            })
            self._retry_queues.add(attempt)
        headers = dict(delivery.headers or {})
        headers[C.RABBIT_ATTEMPT_HEADER] = attempt + 1
        await self._publish(queue, aio_pika.Message(
            delivery.body, headers=headers, priority=delivery.priority,
            message_id=delivery.message_id, expiration=self.retry_delay(attempt),
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        ))

    async def _publish(self, queue: str, message: aio_pika.Message) -> None:
        await self._started().default_exchange.publish(message, routing_key=queue)

    async def lag(self) -> int:
        """Messages ready in the queue (not delivered to any consumer yet)."""
        return await self._ready(self.queue)

    async def _ready(self, queue: str) -> int:
        # On the raw channel: aio-pika answers a passive declare of a known queue from
        # its cache, with the count of when it was first declared.
        raw = await self._started().get_underlay_channel()
        declared = await raw.queue_declare(queue, passive=True)
        return int(declared.message_count or 0)

    async def drained(self) -> bool:
        """True when nothing is left to do: the queue and this source's retry queues
        hold no message, none is buffered here and every delivery handed out finished."""
        if self._handed_out or not self._buffer.empty():
            return False
        for queue in [self.queue, *(retry_queue_name(self.queue, n) for n in self._retry_queues)]:
            if await self._ready(queue):
                return False
        return True

    async def wait_drained(self) -> None:
        """Return once `drained()` held on RABBIT_DRAINED_CHECKS checks in a row, spaced
        RABBIT_DRAINED_INTERVAL_S apart (`grebe run --exit-when-done`). A queue has no
        offsets to compare with an end, so "caught up" is "empty and nothing in hand";
        the repeated check covers a delivery still on its way to this consumer."""
        quiet = 0
        while quiet < C.RABBIT_DRAINED_CHECKS:
            await asyncio.sleep(C.RABBIT_DRAINED_INTERVAL_S)
            quiet = quiet + 1 if await self.drained() else 0

    def _started(self) -> AbstractRobustChannel:
        if self._channel is None or self._connection is None:
            raise BrokerError(f"{self.name}: RabbitSource used before start()")
        return self._channel
