"""Dead letters on the local log: the dead-letter topic, read by the replay group.

Replay keeps its own consumer group (DLQ_REPLAY_GROUP) on the dead-letter topic. The
originals are appended to their streams' topics in the same SQLite transaction that
advances that group's offset, so a replay interrupted at any point (kill -9 included)
neither loses nor repeats a dead letter. Two replays at once are serialised by the
group's consumer lock (an flock, dropped by the kernel when its holder dies): the second
starts from where the first committed, so no dead letter is sent twice.
"""

from __future__ import annotations

from grebe import constants as C
from grebe.brokers.dead_letters import Replay, ReplayReport, Router, StoredDeadLetter
from grebe.brokers.local import ConsumerLock, LocalLog, Record
from grebe.errors import BrokerError

REPLAY_BATCH = 500


class LocalDeadLetters:
    """DeadLetterAccess on one local log's dead-letter topic (partition 0)."""

    def __init__(self, log: LocalLog, topic: str,
                 lock_wait_s: float = C.CONSUMER_LOCK_TIMEOUT_S) -> None:
        self._log = log
        self._topic = topic
        self._lock_wait_s = lock_wait_s

    async def peek(self, limit: int) -> list[StoredDeadLetter]:
        """The newest `limit` records, oldest first."""
        log, topic = self._log, self._topic
        await log.open()
        try:
            await log.topic(topic, C.DEFAULT_DEAD_LETTER_PARTITIONS)
            end = (await log.end_offsets(topic)).get(0, 0)
            replayed_to = (await log.committed(C.DLQ_REPLAY_GROUP, topic)).get(0, 0)
            records = await log.read(topic, [(0, max(0, end - limit))], limit)
        finally:
            await log.close()
        return [StoredDeadLetter(0, r.offset, r.value, r.offset < replayed_to) for r in records]

    async def replay(self, route: Router, limit: int | None = None) -> ReplayReport:
        lock = ConsumerLock(self._log.path, C.DLQ_REPLAY_GROUP, self._topic)
        try:
            await lock.acquire(self._lock_wait_s)
        except BrokerError as exc:
            raise BrokerError(
                f"another `grebe dlq replay` is replaying {self._topic!r} of "
                f"{self._log.path} (lock {lock.path}); try again when it is done"
            ) from exc
        try:
            return await self._replay_locked(route, limit)
        finally:
            lock.release()

    async def _replay_locked(self, route: Router, limit: int | None) -> ReplayReport:
        log, topic = self._log, self._topic
        report = ReplayReport()
        await log.open()
        try:
            await log.topic(topic, C.DEFAULT_DEAD_LETTER_PARTITIONS)
            position = (await log.committed(C.DLQ_REPLAY_GROUP, topic)).get(0, 0)
            while limit is None or report.replayed < limit:
                records = await log.read(topic, [(0, position)], REPLAY_BATCH)
                if not records:
                    break
                appends: dict[str, list[Record]] = {}
                for record in records:
                    if limit is not None and report.replayed >= limit:
                        break
                    position = record.offset + 1
                    decision = route(record.value)
                    if isinstance(decision, str):
                        report.skip(f"offset {record.offset}", decision)
                        continue
                    appends.setdefault(decision.topic, []).append(_record(decision))
                    report.replayed += 1
                await log.commit(C.DLQ_REPLAY_GROUP, topic, {0: position}, appends)
        finally:
            await log.close()
        return report


def _record(replay: Replay) -> Record:
    return (replay.key, replay.value)
