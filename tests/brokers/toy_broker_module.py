"""A toy in-memory broker, written as a third party would: this one module, nothing else.

Records live in a process-wide dict of topics; a source reads one topic from its group's
committed offset, commits each message once it and those before it are finished, and
stores dead letters on the dead-letter topic. It is a log with offsets, so `grebe run
--exit-when-done` can tell when it is caught up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from grebe.brokers.backend import BrokerBackend, BrokerSettings
from grebe.brokers.dead_letters import ReplayReport, Router, StoredDeadLetter
from grebe.core.source import Message, Outcome

TOPICS: dict[str, list[tuple[bytes | None, bytes]]] = {}
COMMITTED: dict[tuple[str, str], int] = {}  # (group, topic) -> next offset to read
REPLAYED: dict[str, int] = {}  # dead-letter topic -> records replayed so far
WAIT_S = 0.01  # poll's wait when empty: producers may run in another event loop


class ToySettings(BrokerSettings):
    greeting: str = "hello"


class ToySource:
    handles_retry = False

    def __init__(self, name: str, topic: str, group: str, dead_letters: str) -> None:
        self.name, self._topic, self._dead_letters = name, topic, dead_letters
        self._key = (group, topic)
        self._next = COMMITTED.get(self._key, 0)
        self._finished: set[int] = set()
        self._acked = asyncio.Event()

    async def start(self) -> None:
        TOPICS.setdefault(self._topic, [])

    async def stop(self) -> None:
        pass

    async def poll(self, max_messages: int, timeout: float) -> list[Message]:  # noqa: ASYNC109
        records = TOPICS.setdefault(self._topic, [])
        if self._next >= len(records) and timeout > 0:
            await asyncio.sleep(min(timeout, WAIT_S))
        batch = [Message(source=self.name, value=value, key=key, offset=offset)
                 for offset, (key, value) in enumerate(
                     records[self._next:self._next + max_messages], start=self._next)]
        self._next += len(batch)
        return batch

    async def ack(self, message: Message, outcome: Outcome, *, reason: str | None = None,
                  dead_letter: bytes | None = None) -> None:
        if outcome is Outcome.DEAD:
            assert dead_letter is not None
            TOPICS.setdefault(self._dead_letters, []).append((message.key, dead_letter))
        self._finished.add(message.offset)
        committed = COMMITTED.get(self._key, 0)
        while committed in self._finished:
            committed += 1
        COMMITTED[self._key] = committed
        self._acked.set()

    async def end_offsets(self) -> dict[int, int]:
        return {0: len(TOPICS.get(self._topic, []))}

    async def wait_committed(self, target: dict[int, int]) -> None:
        while COMMITTED.get(self._key, 0) < target.get(0, 0):
            self._acked.clear()
            await self._acked.wait()


class ToyProducer:
    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def publish(self, topic: str, key: bytes | None, value: bytes) -> None:
        TOPICS.setdefault(topic, []).append((key, value))

    async def publish_many(self, topic: str,
                           records: Sequence[tuple[bytes | None, bytes]]) -> None:
        TOPICS.setdefault(topic, []).extend(records)


class ToyDeadLetters:
    def __init__(self, topic: str) -> None:
        self._topic = topic

    async def peek(self, limit: int) -> list[StoredDeadLetter]:
        done = REPLAYED.get(self._topic, 0)
        return [StoredDeadLetter(0, offset, value, offset < done)
                for offset, (_, value) in enumerate(TOPICS.get(self._topic, []))][-limit:]

    async def replay(self, route: Router, limit: int | None = None) -> ReplayReport:
        report = ReplayReport()
        records = TOPICS.get(self._topic, [])
        while REPLAYED.get(self._topic, 0) < len(records):
            if limit is not None and report.replayed >= limit:
                break
            offset = REPLAYED.get(self._topic, 0)
            decision = route(records[offset][1])
            if isinstance(decision, str):
                report.skip(f"offset {offset}", decision)
            else:
                TOPICS.setdefault(decision.topic, []).append((decision.key, decision.value))
                report.replayed += 1
            REPLAYED[self._topic] = offset + 1
        return report


BACKEND = BrokerBackend(
    name="toy",
    settings=ToySettings,
    build_source=lambda stream, config: ToySource(
        stream.name, stream.topic, stream.group, config.dispatcher.dead_letter_topic),
    build_producer=lambda config, topic, role: ToyProducer(),
    dead_letters=lambda config: ToyDeadLetters(config.dispatcher.dead_letter_topic),
)
