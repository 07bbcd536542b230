"""The AnnotationStore protocol and an in-memory store for unit tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from grebe.types import Annotation


@runtime_checkable
class AnnotationStore(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def upsert(self, annotations: Sequence[Annotation]) -> None:
        """Insert or replace by (post_id, producer, version); idempotent."""
        ...

    async def get(self, post_id: str) -> list[Annotation]: ...


class MemoryStore:
    """A dict-backed AnnotationStore for unit tests and embedding in other tools."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, str], Annotation] = {}

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def upsert(self, annotations: Sequence[Annotation]) -> None:
        for annotation in annotations:
            previous = self.rows.get(annotation.key)
            if previous is not None:
                annotation.created_at = previous.created_at
            self.rows[annotation.key] = annotation

    async def get(self, post_id: str) -> list[Annotation]:
        return [a for (pid, _, _), a in sorted(self.rows.items()) if pid == post_id]
