"""The local log's Producer: concurrent publishes share one SQLite transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from grebe.brokers.local_sql import Record
from grebe.sqlitedb import GroupWriter

if TYPE_CHECKING:
    from grebe.brokers.local import LocalLog


class LocalProducer:
    """Publishes to local-log topics; concurrent publishes share one transaction."""

    def __init__(self, log: LocalLog) -> None:
        self._log = log
        self._writer: GroupWriter[tuple[str, bytes | None, bytes]] = GroupWriter(self._flush)

    async def start(self) -> None:
        await self._log.open()

    async def stop(self) -> None:
        await self._writer.close()
        await self._log.close()

    async def publish(self, topic: str, key: bytes | None, value: bytes) -> None:
        await self._writer.submit([(topic, key, value)])

    async def publish_many(self, topic: str, records: Sequence[Record]) -> None:
        await self._writer.submit([(topic, key, value) for key, value in records])

    async def append_at(self, topic: str, records: Sequence[Record]
                        ) -> list[tuple[int, int]]:
        """Append in one transaction of its own; (partition, offset) of each record."""
        return await self._log.append(topic, list(records))

    async def _flush(self, items: list[tuple[str, bytes | None, bytes]]) -> None:
        by_topic: dict[str, list[Record]] = {}
        for topic, key, value in items:
            by_topic.setdefault(topic, []).append((key, value))
        await self._log.append_many(by_topic)
