"""Admission: the dispatcher's in-flight slots, handed out a batch at a time.

A message holds its slot from its poll until it is finished (acked done or
dead-lettered), including while it waits for a retry, so the capacity bounds everything
the dispatcher holds in memory.
"""

from __future__ import annotations

import asyncio


class InFlightSlots:
    """A counting semaphore that hands out as many free slots as a batch can use.

    Slots taken for a poll are `reserved`; each message the poll hands out `claim`s one
    as it becomes an entry, and `settle` gives back what was not claimed. Claiming per
    message (not counting after the poll) keeps the count right when a poll fails half
    way: the entries already made hold their slots, the rest are returned."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0  # held by messages, or reserved for a poll under way
        self.reserved = 0
        self._freed = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()

    async def acquire(self, most: int, stopping: asyncio.Event) -> int:
        """Wait for at least one free slot and take up to `most`; 0 once `stopping`."""
        while self.used >= self.capacity and not stopping.is_set():
            self._freed.clear()
            await self._freed.wait()
        if stopping.is_set():
            return 0
        n = min(most, self.capacity - self.used)
        self.used += n
        self.reserved += n
        self.idle.clear()
        return n

    def claim(self, reservation: Reservation) -> None:
        """One reserved slot now belongs to a message (until its `release`)."""
        if reservation.left <= 0:
            raise RuntimeError("a poll handed out more messages than it reserved slots for")
        reservation.left -= 1
        self.reserved -= 1

    def settle(self, reservation: Reservation) -> None:
        """The poll is over: give back the slots it reserved and did not claim."""
        left, reservation.left = reservation.left, 0
        self.reserved -= left
        self.release(left)

    def release(self, n: int = 1) -> None:
        if n:
            self.used -= n
            self._freed.set()
        if self.used == 0:
            self.idle.set()

    def wake(self) -> None:
        self._freed.set()


class Reservation:
    """The slots one intake round reserved and has not yet given to messages."""

    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left

