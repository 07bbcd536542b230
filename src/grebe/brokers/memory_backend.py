"""The in-memory broker (`broker: memory`): every topic is a MemorySource in this process.

For tests, notebooks and benchmarks that want the whole Runtime without a log file or a
server: `grebe ingest` (in the same process), the API and the output sink publish onto
the topic's MemorySource, the stream reads it, and its dead letters stay on it until
`grebe dlq replay` puts them back. Nothing survives the process, by design.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from pydantic import Field

from grebe.brokers.backend import BrokerBackend, BrokerSettings, ProducerRole
from grebe.brokers.dead_letters import ReplayReport, Router, StoredDeadLetter
from grebe.brokers.memory import MemorySource

if TYPE_CHECKING:
    from grebe.config import GrebeConfig, StreamConfig

NAME = "memory"

_TOPICS: dict[str, MemorySource] = {}  # topic -> its messages, for this process
_REPLAYED: dict[str, int] = {}  # topic -> dead letters of its source replayed so far


class MemoryBrokerConfig(BrokerSettings):
    partitions: int = Field(default=1, ge=1)  # of a topic, when it is first used


def memory_topic(topic: str, partitions: int = 1) -> MemorySource:
    """The process's MemorySource for `topic`, made on first use."""
    if topic not in _TOPICS:
        _TOPICS[topic] = MemorySource(topic, partitions)
    return _TOPICS[topic]


def _partitions(config: GrebeConfig) -> int:
    return cast(MemoryBrokerConfig, BACKEND.settings_of(config)).partitions


def _source(stream: StreamConfig, config: GrebeConfig) -> MemorySource:
    source = memory_topic(stream.topic, _partitions(config))
    source.name = stream.name
    return source


class MemoryProducer:
    """Puts records on the topics' MemorySources (partitioned by key, as they do)."""

    def __init__(self, partitions: int) -> None:
        self._partitions = partitions

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def publish(self, topic: str, key: bytes | None, value: bytes) -> None:
        memory_topic(topic, self._partitions).put(value, key=key)

    async def publish_many(self, topic: str,
                           records: Sequence[tuple[bytes | None, bytes]]) -> None:
        for key, value in records:
            await self.publish(topic, key, value)


def _producer(config: GrebeConfig, topic: str, role: ProducerRole) -> MemoryProducer:
    return MemoryProducer(_partitions(config))


class MemoryDeadLetters:
    """The dead letters the sources of `topics` kept (a MemorySource keeps its own), in
    topic order; a replay runs start to end without yielding to the event loop between
    records, so two replays never send one record twice."""

    def __init__(self, topics: Sequence[str]) -> None:
        self._topics = list(dict.fromkeys(topics))

    def _sources(self) -> list[tuple[str, MemorySource]]:
        return [(topic, _TOPICS[topic]) for topic in self._topics if topic in _TOPICS]

    async def peek(self, limit: int) -> list[StoredDeadLetter]:
        stored = [StoredDeadLetter(0, offset, value, offset < _REPLAYED.get(topic, 0))
                  for topic, source in self._sources()
                  for offset, value in enumerate(source.dead_letters)]
        return stored[-limit:]

    async def replay(self, route: Router, limit: int | None = None) -> ReplayReport:
        report = ReplayReport()
        for topic, source in self._sources():
            while _REPLAYED.get(topic, 0) < len(source.dead_letters):
                if limit is not None and report.replayed >= limit:
                    return report
                offset = _REPLAYED[topic] = _REPLAYED.get(topic, 0) + 1
                decision = route(source.dead_letters[offset - 1])
                if isinstance(decision, str):
                    report.skip(f"{topic} dead letter {offset - 1}", decision)
                    continue
                memory_topic(decision.topic).put(decision.value, key=decision.key)
                report.replayed += 1
        return report


BACKEND = BrokerBackend(
    name=NAME, settings=MemoryBrokerConfig, build_source=_source, build_producer=_producer,
    dead_letters=lambda config: MemoryDeadLetters(
        [s.topic for s in config.streams if s.broker == NAME]),
)
