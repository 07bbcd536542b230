"""Kafka (aiokafka): a consumer-group Source with commit-after-processing (its Producer
is kafka_producer.py, topic administration kafka_admin.py; both re-exported here).

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
whose record is not stored. A failed produce is retried in the background with
exponential backoff while the partition's commits stay blocked at that message; the
retry ends when it succeeds, or when the partition is revoked or the source stops (the
message is then redelivered and dead-lettered again).

Batch jobs (`grebe run --exit-when-done`) ask `end_offsets()` once and wait in
`wait_committed()` until the group has committed that far.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import KafkaError

from grebe import constants as C
from grebe.brokers.kafka_admin import (  # re-exported: one import for tests and tools
    admin_client,
    as_kafka_config,
    create_topic,
    delete_topic,
    topic_partitions,
)
from grebe.brokers.kafka_producer import KafkaProducer
from grebe.brokers.kafka_security import kafka_client_kwargs, raise_if_refused
from grebe.config import KafkaConfig
from grebe.core.backoff import Backoff
from grebe.core.offsets import OffsetTracker
from grebe.core.source import Message, Outcome
from grebe.errors import BrokerError, ConfigError

__all__ = [
    "KafkaProducer", "KafkaSource", "admin_client", "as_kafka_config", "create_topic",
    "delete_topic", "topic_partitions",
]
log = logging.getLogger(__name__)

# Dead-letter produce retries: full-jitter exponential backoff between these bounds.
_DEAD_LETTER_BACKOFF_BASE_S = 0.2
_DEAD_LETTER_BACKOFF_MAX_S = 10.0
# wait_committed re-reads the group's committed offsets this often for partitions this
# member does not own (another member commits them; the broker has no event for that).
_FOREIGN_COMMIT_RECHECK_S = 1.0


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
        dead_letter_backoff_base_s: float = _DEAD_LETTER_BACKOFF_BASE_S,
        dead_letter_backoff_max_s: float = _DEAD_LETTER_BACKOFF_MAX_S,
    ) -> None:
        self.name = name
        self.topic = topic
        self.group = group
        self._config = config
        self._dead_letter_topic = dead_letter_topic
        self._consumer: AIOKafkaConsumer | None = None
        self._dead_letters: KafkaProducer = KafkaProducer(config, linger_ms=0)
        self._dead_letter_backoff = Backoff(
            dead_letter_backoff_base_s, dead_letter_backoff_max_s, random.Random()
        )
        self._dead_letter_retrying: set[asyncio.Task[None]] = set()
        #: Failed dead-letter produce attempts so far (each one was retried or abandoned
        #: on revocation/stop); a plain counter for tests and diagnostics.
        self.dead_letter_failures = 0
        self._committed: dict[int, int] = {}  # partition -> next offset, last known commit
        self._commit_made = asyncio.Event()  # pulsed by every commit (wait_committed)
        self._assigned = asyncio.Event()  # set by the first assignment (end_offsets)
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
        from grebe.brokers.kafka_topics import ensure_topics, topic_spec

        try:
            # A mistyped input topic is an error here, not an empty auto-created topic.
            await ensure_topics(config, [
                topic_spec(config, self.topic, "input"),
                topic_spec(config, self._dead_letter_topic, "dead-letters"),
            ])
        except ConfigError as exc:
            raise ConfigError(f"stream {self.name!r}: {exc}") from exc
        except BrokerError as exc:
            raise BrokerError(f"{self.name}: cannot consume Kafka topic {self.topic!r} at "
                              f"{config.bootstrap_servers}: {exc}") from exc
        consumer = AIOKafkaConsumer(
            **kafka_client_kwargs(config),
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
            await raise_if_refused(config, exc)
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
        tasks = [*self._tasks, *self._dead_letter_retrying]
        for task in tasks:
            task.cancel()
        for task in tasks:
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
            try:
                await self._dead_letters.publish(
                    self._dead_letter_topic, message.key, dead_letter
                )
            except BrokerError as exc:
                self._dead_letter_failed(message, 1, exc)
                task = asyncio.create_task(
                    self._retry_dead_letter(message, dead_letter),
                    name=f"kafka-dead-letter:{self.name}:{partition}:{message.offset}",
                )
                self._dead_letter_retrying.add(task)
                task.add_done_callback(self._dead_letter_retrying.discard)
                return  # the offset stays unfinished: commits stop here until it is stored
            if self._epochs.get(partition) != message.token:
                return  # revoked while we produced: the new owner redelivers it
        self._finish(message)

    def _finish(self, message: Message) -> None:
        self._tracker.finish(message.partition, message.offset)
        self._dirty.set()
        self._acked.set()

    def _dead_letter_failed(self, message: Message, attempt: int, exc: BaseException) -> None:
        self.dead_letter_failures += 1
        log.warning(
            "%s: dead-letter produce of %d:%d to %r failed (attempt %d: %s); partition %d "
            "commits wait for it, retrying", self.name, message.partition, message.offset,
            self._dead_letter_topic, attempt, exc, message.partition,
        )

    async def _retry_dead_letter(self, message: Message, dead_letter: bytes) -> None:
        """Produce `dead_letter` until the broker stores it, then finish the offset. Ends
        early (offset left unfinished) if the partition is revoked: its new owner
        redelivers the message and dead-letters it itself."""
        attempt = 1
        while True:
            await asyncio.sleep(self._dead_letter_backoff.delay(attempt))
            if self._epochs.get(message.partition) != message.token:
                log.info("%s: partition %d revoked; dead letter %d:%d left to its next owner",
                         self.name, message.partition, message.partition, message.offset)
                return
            attempt += 1
            try:
                await self._dead_letters.publish(
                    self._dead_letter_topic, message.key, dead_letter
                )
            except BrokerError as exc:
                self._dead_letter_failed(message, attempt, exc)
                continue
            if self._epochs.get(message.partition) == message.token:
                log.info("%s: dead letter %d:%d stored after %d attempts", self.name,
                         message.partition, message.offset, attempt)
                self._finish(message)
            return

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
            self._note_committed(offsets)

    def _note_committed(self, offsets: dict[int, int]) -> None:
        for partition, offset in offsets.items():
            if offset > self._committed.get(partition, -1):
                self._committed[partition] = offset
        self._commit_made.set()
        self._commit_made = asyncio.Event()

    # --- batch jobs (grebe run --exit-when-done) ----------------------------------------

    async def end_offsets(self) -> dict[int, int]:
        """Per assigned partition, the offset after its last record, now. Waits for the
        group's first assignment (a fresh consumer has none until it joined)."""
        consumer = self._started()
        await self._assigned.wait()
        assigned = [tp for tp in consumer.assignment() if tp.topic == self.topic]
        if not assigned:
            return {}
        try:
            ends = await consumer.end_offsets(assigned)
        except KafkaError as exc:
            raise BrokerError(f"{self.name}: cannot read end offsets of {self.topic!r}: "
                              f"{exc}") from exc
        return {tp.partition: offset for tp, offset in ends.items()}

    async def wait_committed(self, target: dict[int, int]) -> None:
        """Return once the group committed at least `target` (partition: next offset).

        Woken by this member's commits. Partitions this member does not own (moved to
        another member by a rebalance) are re-read from the group coordinator every
        `_FOREIGN_COMMIT_RECHECK_S`, as is everything on the first pass (a topic this
        group finished before has nothing left to commit)."""
        await self._refresh_committed(target)
        while missing := self._missing(target):
            made = self._commit_made
            owned = {tp.partition for tp in self._started().assignment()}
            if set(missing) <= owned:
                await made.wait()
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_FOREIGN_COMMIT_RECHECK_S):
                    await made.wait()
            await self._refresh_committed({p: o for p, o in missing.items() if p not in owned})

    def _missing(self, target: dict[int, int]) -> dict[int, int]:
        return {p: o for p, o in target.items() if self._committed.get(p, 0) < o}

    async def _refresh_committed(self, target: dict[int, int]) -> None:
        consumer = self._started()
        try:
            for partition in self._missing(target):
                offset = await consumer.committed(TopicPartition(self.topic, partition))
                if offset is not None and offset > self._committed.get(partition, -1):
                    self._committed[partition] = offset
        except KafkaError as exc:
            raise BrokerError(f"{self.name}: cannot read committed offsets: {exc}") from exc

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
        self._assigned.set()
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
