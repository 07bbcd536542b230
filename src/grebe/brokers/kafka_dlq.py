"""Dead letters on Kafka: the dead-letter topic, replayed by one consumer group.

Replay is exclusive through the group `DLQ_REPLAY_GROUP.<dead-letter topic>`: Kafka
gives each partition of the dead-letter topic to one member at a time. A member sends a
record to its stream's topic (idempotent producer, acks=all) and only then advances its
position, holding a lock across both; on revocation it takes the same lock, so the
record being sent finishes first, commits its position and hands the partition over. The
next owner starts from that commit: two concurrent `grebe dlq replay` never send one
dead letter twice (only a member killed between a send and its commit leaves one to be
resent).

Each member replays up to the end offsets it saw at start and stops when its
partitions are done or it owns none (another replay has them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import KafkaError

from grebe import constants as C
from grebe.brokers.dead_letters import ReplayReport, Router, StoredDeadLetter
from grebe.brokers.kafka_admin import topic_partitions
from grebe.brokers.kafka_producer import KafkaProducer
from grebe.brokers.kafka_security import kafka_client_kwargs, raise_if_refused
from grebe.config import KafkaConfig
from grebe.errors import BrokerError

log = logging.getLogger(__name__)

_POLL_MS = 500
REPLAY_BATCH = 100  # records fetched (and committed) at a time


class KafkaDeadLetters:
    """DeadLetterAccess on one Kafka dead-letter topic."""

    def __init__(self, config: KafkaConfig, topic: str, group: str | None = None) -> None:
        self._config = config
        self._topic = topic
        # One group per dead-letter topic: deployments sharing a cluster (and a group id
        # namespace) do not rebalance each other's replays.
        self._group = group or f"{C.DLQ_REPLAY_GROUP}.{topic}"

    def _consumer(self, **options: object) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            **kafka_client_kwargs(self._config),
            client_id=f"{self._config.client_id}-dlq", group_id=self._group,
            enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=self._config.session_timeout_ms,
            heartbeat_interval_ms=max(100, self._config.session_timeout_ms // 10), **options,
        )

    async def partitions(self) -> list[TopicPartition]:
        """The dead-letter topic's partitions, asked of the cluster (a consumer's
        metadata knows only the topics it subscribed to)."""
        counts = await topic_partitions(self._config, [self._topic])
        if self._topic not in counts:
            raise BrokerError(f"Kafka dead-letter topic {self._topic!r} does not exist "
                              "(`grebe topics create` declares it)")
        return [TopicPartition(self._topic, p) for p in range(counts[self._topic])]

    async def peek(self, limit: int) -> list[StoredDeadLetter]:
        """The newest `limit` records of each partition, oldest first (by timestamp)."""
        consumer = self._consumer()
        try:
            await consumer.start()
            tps = await self.partitions()
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)
            starts = await consumer.beginning_offsets(tps)
            found: list[tuple[int, StoredDeadLetter]] = []
            for tp in tps:
                replayed_to = await consumer.committed(tp) or 0
                first = max(starts[tp], ends[tp] - limit)
                if first >= ends[tp]:
                    continue
                consumer.seek(tp, first)
                while await consumer.position(tp) < ends[tp]:
                    batch = await consumer.getmany(tp, timeout_ms=_POLL_MS)
                    for record in batch.get(tp, []):
                        found.append((record.timestamp, StoredDeadLetter(
                            tp.partition, record.offset, record.value,
                            record.offset < replayed_to,
                        )))
        except KafkaError as exc:
            await raise_if_refused(self._config, exc)
            raise BrokerError(f"Kafka at {self._config.bootstrap_servers}: {exc}") from exc
        finally:
            await consumer.stop()
        found.sort(key=lambda item: (item[0], item[1].partition, item[1].offset))
        return [entry for _, entry in found[-limit:]]

    async def replay(self, route: Router, limit: int | None = None) -> ReplayReport:
        run = _ReplayMember(self, route, limit)
        return await run.go()


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, member: _ReplayMember) -> None:
        self._member = member

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._member.revoked([tp.partition for tp in revoked])

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self._member.assigned([tp.partition for tp in assigned])


class _ReplayMember:
    """One `grebe dlq replay` run: a member of the replay group."""

    def __init__(self, access: KafkaDeadLetters, route: Router, limit: int | None) -> None:
        self._access = access
        self._topic = access._topic
        self._route = route
        self._limit = limit
        # Small fetches: each is committed before the next, so a replay killed midway
        # resends at most one batch.
        self._consumer = access._consumer(max_poll_records=REPLAY_BATCH)
        self._producer = KafkaProducer(access._config, linger_ms=0)
        self._lock = asyncio.Lock()  # held across send + advance, and by revocation
        self._next: dict[int, int] = {}  # owned partition -> next offset to replay
        self._uncommitted: set[int] = set()
        self._targets: dict[int, int] = {}  # partition -> end offset at start
        self._targets_seen: set[str] = set()  # stream topics known to exist
        self._assigned_once = asyncio.Event()
        self._rebalancing = False  # revoked, not yet assigned: not done, whatever it owns
        self.report = ReplayReport()

    async def go(self) -> ReplayReport:
        consumer = self._consumer
        try:
            await self._producer.start()
            await consumer.start()
            tps = await self._access.partitions()
            self._targets = {tp.partition: o for tp, o in (await consumer.end_offsets(tps)).items()}
            consumer.subscribe([self._topic], listener=_Listener(self))
            while not self._done():
                batches = await consumer.getmany(timeout_ms=_POLL_MS)
                for tp, records in batches.items():
                    for record in records:
                        if self._limit is not None and self.report.replayed >= self._limit:
                            break
                        await self._one(tp.partition, record.offset, record.value)
                await self._commit()
        except KafkaError as exc:
            await raise_if_refused(self._access._config, exc)
            raise BrokerError(f"Kafka at {self._access._config.bootstrap_servers}: {exc}"
                              ) from exc
        finally:
            with contextlib.suppress(KafkaError, BrokerError):
                await self._commit()
            await consumer.stop()  # leaves the group: another member takes the rest
            await self._producer.stop()
        return self.report

    def _done(self) -> bool:
        if self._limit is not None and self.report.replayed >= self._limit:
            return True
        if self._rebalancing or not self._assigned_once.is_set():
            return False
        return all(self._next[p] >= self._targets.get(p, 0) for p in self._next)

    async def _one(self, partition: int, offset: int, value: bytes) -> None:
        async with self._lock:
            expected = self._next.get(partition)
            if expected is None or offset < expected:
                return  # not ours (any more), or already replayed by us or a member before
            decision = self._route(value)
            if isinstance(decision, str):
                self.report.skip(f"partition {partition} offset {offset}", decision)
            else:
                await self._check_target(decision.topic)
                await self._producer.publish(decision.topic, decision.key, decision.value)
                self.report.replayed += 1
            self._next[partition] = offset + 1
            self._uncommitted.add(partition)

    async def _check_target(self, topic: str) -> None:
        """A stream topic that does not exist stops the replay (what was sent so far is
        committed): producing to it would leave it to broker auto-create."""
        if topic in self._targets_seen:
            return
        if not await topic_partitions(self._access._config, [topic]):
            raise BrokerError(f"stream topic {topic!r} does not exist; create it (`grebe "
                              "topics create`) and replay again")
        self._targets_seen.add(topic)

    async def _commit(self, partitions: Iterable[int] | None = None) -> None:
        wanted = self._uncommitted if partitions is None else set(partitions)
        offsets = {TopicPartition(self._topic, p): self._next[p]
                   for p in wanted & self._uncommitted if p in self._next}
        if offsets:
            await self._consumer.commit(offsets)
            self._uncommitted -= {tp.partition for tp in offsets}

    async def revoked(self, partitions: list[int]) -> None:
        self._rebalancing = True
        async with self._lock:  # the record being sent finishes first
            try:
                await self._commit(partitions)
            except KafkaError:
                log.warning("dlq replay: commit on revocation failed; the next owner may "
                            "resend what this member sent since its last commit",
                            exc_info=True)
            for partition in partitions:
                self._next.pop(partition, None)
                self._uncommitted.discard(partition)

    async def assigned(self, partitions: list[int]) -> None:
        async with self._lock:
            for partition in partitions:
                committed = await self._consumer.committed(TopicPartition(self._topic, partition))
                self._next[partition] = committed or 0
        self._rebalancing = False
        self._assigned_once.set()
