"""Commit-after-processing for partitioned logs.

Messages of one partition finish in any order (a slow post next to fast ones), but a
log only remembers one position per partition. Committing an offset says "everything
before it is done", so the tracker commits, per partition, only up to the lowest offset
that is still unfinished: a crash then redelivers unfinished posts and never loses one.

Each partition keeps its handed-out offsets in a deque (in hand-out order) and the
unfinished ones in a set; finishing the head pops every finished offset off the front.
Every offset is pushed and popped once, so each call is O(1) amortized.
"""

from __future__ import annotations

from collections import deque


class _Partition:
    __slots__ = ("committed", "next_commit", "tracked", "unfinished")

    def __init__(self) -> None:
        self.tracked: deque[int] = deque()  # handed out, not yet known to be committable
        self.unfinished: set[int] = set()  # tracked offsets not finished yet
        self.next_commit: int | None = None  # 1 + highest offset done with all before it
        self.committed: int | None = None  # what the broker last stored for us


class OffsetTracker:
    """Per-partition commit positions that never pass an unfinished message.

    Only offsets given to `track` count: gaps in a log (compaction, transaction markers)
    are simply never tracked, so they never hold a partition back."""

    def __init__(self) -> None:
        self._partitions: dict[int, _Partition] = {}

    def track(self, partition: int, offset: int) -> None:
        """Record that `offset` was handed out. Offsets of a partition must increase."""
        state = self._partitions.get(partition)
        if state is None:
            state = self._partitions[partition] = _Partition()
        if state.tracked:
            last: int | None = state.tracked[-1]
        else:
            last = None if state.next_commit is None else state.next_commit - 1
        if last is not None and offset <= last:
            raise ValueError(
                f"offset {offset} of partition {partition} tracked out of order (after "
                f"{last}); revoke() the partition before seeking back"
            )
        state.tracked.append(offset)
        state.unfinished.add(offset)

    def finish(self, partition: int, offset: int) -> None:
        """Record that `offset` is done (processed or dead-lettered)."""
        state = self._partitions.get(partition)
        if state is None or offset not in state.unfinished:
            raise ValueError(
                f"offset {offset} of partition {partition} is not tracked or already finished"
            )
        unfinished = state.unfinished
        unfinished.discard(offset)
        tracked = state.tracked
        while tracked and tracked[0] not in unfinished:
            state.next_commit = tracked.popleft() + 1

    def committable(self) -> dict[int, int]:
        """{partition: next offset to commit} for partitions that advanced since their
        last `mark_committed` (Kafka semantics: the offset of the next message to read)."""
        return {
            partition: state.next_commit
            for partition, state in self._partitions.items()
            if state.next_commit is not None and state.next_commit != state.committed
        }

    def mark_committed(self, partition: int, offset: int) -> None:
        """Record that the broker stored `offset` for `partition`."""
        state = self._partitions.get(partition)
        if state is None:
            state = self._partitions[partition] = _Partition()
        state.committed = offset

    def pending(self, partition: int) -> int:
        """How many tracked offsets of `partition` are not finished yet."""
        state = self._partitions.get(partition)
        return 0 if state is None else len(state.unfinished)

    def lowest_unfinished(self, partition: int) -> int | None:
        """The offset holding `partition` back, or None when nothing is pending."""
        state = self._partitions.get(partition)
        return state.tracked[0] if state is not None and state.tracked else None

    def revoke(self, partition: int) -> None:
        """Forget `partition` (rebalanced away): its unfinished messages will be
        redelivered to whoever owns it next."""
        self._partitions.pop(partition, None)

    @property
    def partitions(self) -> list[int]:
        return list(self._partitions)
