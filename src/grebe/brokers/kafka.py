"""Kafka (aiokafka): a consumer-group Source with commit-after-processing, and a Producer.

Delivery. Auto-commit is off. Offsets handed out by `poll` go into an OffsetTracker;
`ack` only marks them finished, and a committer task commits, in batches, each
partition up to its lowest unfinished offset. A crash therefore redelivers unfinished
posts and never skips one; sinks are idempotent, so a redelivered post rewrites the
same rows.

Slow plans never cost the group its membership. aiokafka leaves the group when nobody
has called `getmany` for `max_poll_interval_ms`; when the dispatcher's in-flight budget
is full it stops polling, so a keep-alive timer pauses every partition (nothing more is
fetched into memory) and calls `getmany` on the paused consumer. The next real poll
resumes them.

Rebalances. On revocation the listener drops nothing it cannot get back: it waits up to
`kafka.revoke_grace_s` for in-flight messages of the revoked partitions to finish,
commits what finished, and forgets the partitions. Each partition has an assignment
epoch carried in `Message.token`; an ack from an earlier epoch is dropped (the message
was, or will be, redelivered to the partition's new owner).

Dead letters are produced to the dead-letter topic and acknowledged by the broker
(acks=all) before the offset is marked finished, so no commit passes a dead message
whose record is not stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Sequence

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from grebe import constants as C
from grebe.config import KafkaConfig
from grebe.core.offsets import OffsetTracker
from grebe.core.source import Message, Outcome
from grebe.errors import BrokerError

log = logging.getLogger(__name__)

_TOPIC_ALREADY_EXISTS = 36  # Kafka protocol error code


# --- producer -------------------------------------------------------------------------------


class KafkaProducer:
    """Producer protocol on an idempotent, acks=all aiokafka producer: `publish` returns
    once the broker stored the record, without duplicates from its own retries."""

    def __init__(self, config: KafkaConfig, *, linger_ms: int = 5) -> None:
        self._config = config
        self._linger_ms = linger_ms
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self._config.bootstrap_servers,
            client_id=f"{self._config.client_id}-producer",
            enable_idempotence=True,
            acks="all",
            linger_ms=self._linger_ms,
        )
        try:
            await producer.start()
        except KafkaError as exc:
            await producer.stop()
            raise BrokerError(
                f"cannot connect to Kafka at {self._config.bootstrap_servers}: {exc}"
            ) from exc
        self._producer = producer

    async def stop(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await producer.stop()  # flushes what is pending

    def _started(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise BrokerError("KafkaProducer used before start()")
        return self._producer

    async def publish(self, topic: str, key: bytes | None, value: bytes) -> None:
        try:
            delivery = await self._started().send(topic, value, key=key)
            await delivery
        except KafkaError as exc:
            raise BrokerError(f"publish to Kafka topic {topic!r} failed: {exc}") from exc

    async def publish_many(
        self, topic: str, records: Sequence[tuple[bytes | None, bytes]]
    ) -> None:
        producer = self._started()
        try:
            deliveries = [await producer.send(topic, value, key=key) for key, value in records]
            await asyncio.gather(*deliveries)
        except KafkaError as exc:
            raise BrokerError(f"publish to Kafka topic {topic!r} failed: {exc}") from exc


# --- topics (tests, benchmarks, first setup) -------------------------------------------------


async def create_topic(
    bootstrap_servers: str, name: str, partitions: int, *, replication: int = 1,
    exist_ok: bool = True,
) -> None:
    """Create `name` with `partitions` partitions and wait until it has leaders."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        await admin.start()
        response = await admin.create_topics([NewTopic(name, partitions, replication)])
        for _topic, code, *rest in response.topic_errors:
            if code and not (code == _TOPIC_ALREADY_EXISTS and exist_ok):
                raise BrokerError(f"cannot create Kafka topic {name!r}: error {code} {rest}")
        deadline = time.monotonic() + 30
        while True:  # bounded: the controller propagates leaders within milliseconds
            topics = await admin.describe_topics([name])
            parts = topics[0]["partitions"] if topics else []
            if len(parts) >= partitions and all(p["leader"] >= 0 for p in parts):
                return
            if time.monotonic() > deadline:
                raise BrokerError(f"Kafka topic {name!r} has no leaders after 30s")
            await asyncio.sleep(0.05)
    except KafkaError as exc:
        raise BrokerError(f"Kafka admin at {bootstrap_servers}: {exc}") from exc
    finally:
        await admin.close()


async def delete_topic(bootstrap_servers: str, name: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        await admin.start()
        await admin.delete_topics([name])
    except KafkaError as exc:
        raise BrokerError(f"Kafka admin at {bootstrap_servers}: {exc}") from exc
    finally:
        await admin.close()


# --- source ---------------------------------------------------------------------------------


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, source: KafkaSource) -> None:
        self._source = source

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._source._on_revoked([tp.partition for tp in revoked])

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self._source._on_assigned([tp.partition for tp in assigned])


class KafkaSource:
    """One stream read from one Kafka topic by the consumer group `group`."""

    handles_retry = False

    def __init__(
        self, name: str, config: KafkaConfig, *, topic: str,
        group: str = C.DEFAULT_CONSUMER_GROUP,
        dead_letter_topic: str = C.DEFAULT_DEAD_LETTER_TOPIC,
    ) -> None:
        self.name = name
        self.topic = topic
        self.group = group
        self._config = config
        self._dead_letter_topic = dead_letter_topic
        self._consumer: AIOKafkaConsumer | None = None
        self._dead_letters = KafkaProducer(config, linger_ms=0)
        self._tracker = OffsetTracker()
        self._epochs: dict[int, int] = {}  # assigned partition -> its assignment epoch
        self._revoking: set[int] = set()  # being revoked: nothing more is handed out
        self._next_epoch = 0
        self._stash: list[Message] = []  # records the keep-alive fetch could not hand out
        self._commit_lock = asyncio.Lock()
        self._dirty = asyncio.Event()
        self._acked = asyncio.Event()  # pulsed by acks, for the revocation wait
        self._fetching = asyncio.Lock()  # one getmany at a time (poll or keep-alive)
        self._paused = False
        self._last_poll = 0.0
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        config = self._config
        consumer = AIOKafkaConsumer(
            bootstrap_servers=config.bootstrap_servers,
            client_id=config.client_id,
            group_id=self.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=config.fetch_max_records,
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=max(100, config.session_timeout_ms // 10),
            max_poll_interval_ms=config.max_poll_interval_ms,
        )
        consumer.subscribe([self.topic], listener=_Listener(self))
        try:
            await consumer.start()
            await self._dead_letters.start()
        except (KafkaError, BrokerError) as exc:
            await consumer.stop()
            raise BrokerError(
                f"{self.name}: cannot consume Kafka topic {self.topic!r} at "
                f"{config.bootstrap_servers}: {exc}"
            ) from exc
        self._consumer = consumer
        self._last_poll = time.monotonic()
        self._tasks = [
            asyncio.create_task(self._commit_loop(), name=f"kafka-commit:{self.name}"),
            asyncio.create_task(self._keepalive_loop(), name=f"kafka-keepalive:{self.name}"),
        ]

    async def stop(self) -> None:
        """Commit what finished, leave the group; unfinished messages stay uncommitted."""
        if self._consumer is None:
            return
        self._stopping = True  # the revocation on leave must not wait for acks
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        try:
            await self.commit()
        finally:
            consumer, self._consumer = self._consumer, None
            await consumer.stop()
            await self._dead_letters.stop()

    # --- poll ---------------------------------------------------------------------------

    async def poll(self, max_messages: int, timeout: float) -> list[Message]:  # noqa: ASYNC109
        consumer = self._started()
        self._last_poll = time.monotonic()
        if self._stash:
            taken, self._stash = self._stash[:max_messages], self._stash[max_messages:]
            return taken
        async with self._fetching:
            if self._paused:
                consumer.resume(*consumer.paused())
                self._paused = False
            try:
                batches = await consumer.getmany(
                    timeout_ms=int(timeout * 1000), max_records=max_messages
                )
            except KafkaError as exc:
                raise BrokerError(f"{self.name}: Kafka fetch failed: {exc}") from exc
        self._last_poll = time.monotonic()
        return self._hand_out(batches)

    def _hand_out(self, batches: dict[TopicPartition, list[ConsumerRecord]]) -> list[Message]:
        messages: list[Message] = []
        name, track = self.name, self._tracker.track
        for tp, records in batches.items():
            partition = tp.partition
            epoch = self._epochs.get(partition)
            if epoch is None or partition in self._revoking:
                continue  # revoked (or being revoked): its next owner reads it again
            for record in records:
                track(partition, record.offset)
                messages.append(Message(
                    source=name, value=record.value, partition=partition,
                    offset=record.offset, key=record.key, timestamp=record.timestamp / 1000,
                    token=epoch,
                ))
        return messages

    async def _keepalive_loop(self) -> None:
        """While the dispatcher does not poll (its in-flight budget is full), pause the
        partitions and keep a fetch going, so the group does not evict this consumer."""
        interval = self._config.max_poll_interval_ms / 1000 * C.KAFKA_KEEPALIVE_FRACTION
        consumer = self._started()
        while True:
            await asyncio.sleep(max(0.0, self._last_poll + interval - time.monotonic()))
            if time.monotonic() - self._last_poll < interval or self._fetching.locked():
                continue
            async with self._fetching:
                assigned = consumer.assignment()
                if assigned:
                    consumer.pause(*assigned)
                    self._paused = True
                try:
                    # Partitions assigned since the pause may still return records.
                    self._stash.extend(self._hand_out(await consumer.getmany(timeout_ms=0)))
                except KafkaError:
                    log.warning("%s: keep-alive fetch failed", self.name, exc_info=True)
            self._last_poll = time.monotonic()

    # --- ack and commit -----------------------------------------------------------------

    async def ack(
        self, message: Message, outcome: Outcome, *, reason: str | None = None,
        dead_letter: bytes | None = None,
    ) -> None:
        if outcome is Outcome.RETRY:
            raise BrokerError(f"{self.name}: Kafka does not redeliver on RETRY")
        partition = message.partition
        if self._epochs.get(partition) != message.token:
            log.debug("%s: late ack of %d:%d dropped (partition was revoked)",
                      self.name, partition, message.offset)
            return
        if outcome is Outcome.DEAD:
            if dead_letter is None:
                raise BrokerError(f"{self.name}: DEAD outcome needs the dead_letter record")
            # Stored before the offset may be committed past it.
            await self._dead_letters.publish(self._dead_letter_topic, message.key, dead_letter)
            if self._epochs.get(partition) != message.token:
                return  # revoked while we produced: the new owner redelivers it
        self._tracker.finish(partition, message.offset)
        self._dirty.set()
        self._acked.set()

    async def commit(self, partitions: Iterable[int] | None = None) -> None:
        """Commit every committable offset (of `partitions`, default all) now."""
        consumer = self._consumer
        if consumer is None:
            return
        async with self._commit_lock:
            offsets = self._tracker.committable()
            if partitions is not None:
                wanted = set(partitions)
                offsets = {p: o for p, o in offsets.items() if p in wanted}
            if not offsets:
                return
            try:
                await consumer.commit(
                    {TopicPartition(self.topic, p): o for p, o in offsets.items()}
                )
            except KafkaError as exc:
                raise BrokerError(f"{self.name}: offset commit failed: {exc}") from exc
            for partition, offset in offsets.items():
                self._tracker.mark_committed(partition, offset)

    async def _commit_loop(self) -> None:
        interval = self._config.commit_interval_s
        while True:
            await self._dirty.wait()
            await asyncio.sleep(interval)  # let acks accumulate into one commit
            self._dirty.clear()
            try:
                await self.commit()
            except BrokerError:
                # Kept in the tracker; the next ack (or the revocation) commits it.
                log.warning("%s: commit failed; will retry", self.name, exc_info=True)

    # --- rebalance ----------------------------------------------------------------------

    def _on_assigned(self, partitions: list[int]) -> None:
        for partition in partitions:
            self._epochs[partition] = self._next_epoch
            self._next_epoch += 1
        log.info("%s: assigned partitions %s of %s", self.name, sorted(partitions), self.topic)

    async def _on_revoked(self, partitions: list[int]) -> None:
        if not partitions:
            return
        # Hand out nothing more of them, so the in-flight set can only shrink.
        self._revoking.update(partitions)
        revoked = set(partitions)
        self._stash = [m for m in self._stash if m.partition not in revoked]
        if not self._stopping:
            grace = self._config.revoke_grace_s
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    while any(self._tracker.pending(p) for p in partitions):
                        self._acked.clear()
                        await self._acked.wait()
        try:
            await self.commit(partitions)
        except BrokerError:
            log.warning("%s: commit on revocation failed", self.name, exc_info=True)
        unfinished = sum(self._tracker.pending(p) for p in partitions)
        for partition in partitions:
            self._tracker.revoke(partition)
            self._epochs.pop(partition, None)
        self._revoking -= revoked
        log.info("%s: revoked partitions %s of %s (%d unfinished, redelivered to the next "
                 "owner)", self.name, sorted(partitions), self.topic, unfinished)

    # --- metrics ------------------------------------------------------------------------

    async def lag(self) -> int:
        """Records of the assigned partitions not fetched yet (for the lag gauge)."""
        consumer = self._consumer
        if consumer is None:
            return 0
        total = 0
        for tp in consumer.assignment():
            highwater = consumer.highwater(tp)
            if highwater is None:
                continue
            with contextlib.suppress(KafkaError, AssertionError):
                total += max(0, highwater - await consumer.position(tp))
        return total + len(self._stash)

    def _started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise BrokerError(f"{self.name}: KafkaSource used before start()")
        return self._consumer
