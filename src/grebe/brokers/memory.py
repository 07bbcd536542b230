"""An in-memory Source for tests and benchmarks (the httpx-style in-memory backend).

It behaves like a partitioned log: offsets per partition, commits through an
OffsetTracker (so `committed` never passes an unfinished message), and every ack,
outcome and dead letter is recorded for assertions. `poll` waits on an event, never a
sleep loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import zlib
from collections import deque
from typing import NamedTuple

from grebe.core.offsets import OffsetTracker
from grebe.core.source import Message, Outcome
from grebe.errors import BrokerError


class Ack(NamedTuple):
    message: Message
    outcome: Outcome
    reason: str | None


class MemorySource:
    def __init__(self, name: str, partitions: int = 1, *, handles_retry: bool = False) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        self.name = name
        self.handles_retry = handles_retry
        self.partitions = partitions
        self.acks: list[Ack] = []
        self.dead_letters: list[bytes] = []
        self.committed: dict[int, int] = {}  # partition -> next offset to read
        self._ready: deque[Message] = deque()
        self._handed: dict[tuple[int, int], Message] = {}
        self._next_offset = [0] * partitions
        self._round_robin = itertools.cycle(range(partitions))
        self._tracker = OffsetTracker()
        self._available = asyncio.Event()
        self._acked = asyncio.Event()
        self._committed_more = asyncio.Event()
        self._ack_target = 0

    def put(self, value: bytes, *, key: bytes | None = None) -> Message:
        """Append a message: partition by key hash (as Kafka does), else round-robin."""
        partition = zlib.crc32(key) % self.partitions if key else next(self._round_robin)
        message = self._append(value, key, partition, attempt=1)
        self._ready.append(message)
        self._available.set()
        return message

    def _append(self, value: bytes, key: bytes | None, partition: int, attempt: int) -> Message:
        offset = self._next_offset[partition]
        self._next_offset[partition] += 1
        return Message(
            source=self.name, value=value, partition=partition, offset=offset, key=key,
            attempt=attempt,
        )

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def poll(self, max_messages: int, timeout: float) -> list[Message]:  # noqa: ASYNC109
        if not self._ready and timeout > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._available.wait()
        batch = [self._ready.popleft() for _ in range(min(max_messages, len(self._ready)))]
        if not self._ready:
            self._available.clear()
        for message in batch:
            self._tracker.track(message.partition, message.offset)
            self._handed[message.partition, message.offset] = message
        return batch

    async def ack(
        self, message: Message, outcome: Outcome, *, reason: str | None = None,
        dead_letter: bytes | None = None,
    ) -> None:
        if outcome is Outcome.DEAD and dead_letter is None:
            raise BrokerError(f"{self.name}: DEAD ack without a dead letter")
        if outcome is Outcome.RETRY and not self.handles_retry:
            raise BrokerError(f"{self.name}: RETRY ack to a source that does not retry")
        if self._handed.pop((message.partition, message.offset), None) is None:
            raise BrokerError(f"{self.name}: ack of {message.partition}:{message.offset}, "
                              "which is not handed out (or was acked already)")
        if outcome is Outcome.DEAD:
            self.dead_letters.append(dead_letter)  # type: ignore[arg-type]
        elif outcome is Outcome.RETRY:
            # Redelivered (after what is queued, so offsets stay in order) with the
            # delivery count a broker retry queue keeps.
            self._ready.append(
                self._append(message.value, message.key, message.partition, message.attempt + 1)
            )
            self._available.set()
        self.acks.append(Ack(message, outcome, reason))
        self._tracker.finish(message.partition, message.offset)
        for partition, offset in self._tracker.committable().items():
            self._tracker.mark_committed(partition, offset)
            self.committed[partition] = offset
            self._committed_more.set()
        if len(self.acks) >= self._ack_target:
            self._acked.set()

    def lag(self) -> int:
        return len(self._ready)

    async def end_offsets(self) -> dict[int, int]:
        """Per partition, the offset its next message will get: a batch job (`grebe run
        --exit-when-done` on `broker: memory`) waits until that much is committed."""
        return dict(enumerate(self._next_offset))

    async def wait_committed(self, target: dict[int, int]) -> None:
        while any(self.committed.get(p, 0) < offset for p, offset in target.items()):
            self._committed_more.clear()
            await self._committed_more.wait()

    @property
    def unacked(self) -> list[Message]:
        """Messages handed out and not finished: what a broker would redeliver."""
        return list(self._handed.values())

    async def wait_acked(self, count: int) -> None:
        """Return once `count` acks were received in total."""
        while len(self.acks) < count:
            self._ack_target = count
            self._acked.clear()
            await self._acked.wait()
