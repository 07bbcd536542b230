"""The AnnotationStore protocol and an in-memory store for unit tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from grebe.errors import PostIdReusedError
from grebe.types import Annotation


def reused_id_error(annotation: Annotation, stored: str) -> PostIdReusedError:
    """The error for `annotation` whose post id is held under fingerprint `stored`."""
    return PostIdReusedError(
        f"post id {annotation.post_id!r} reused with different content (stored "
        f"fingerprint {stored}, this post {annotation.content_fingerprint})"
    )


def refuse_reused_ids(annotations: Sequence[Annotation], stored: dict[str, str]) -> None:
    """Raise PostIdReusedError if an annotation's post fingerprint differs from the one
    stored for its id (`stored`: post id -> fingerprint; "" or missing: unknown)."""
    for a in annotations:
        known = stored.get(a.post_id)
        if known and a.content_fingerprint and known != a.content_fingerprint:
            raise reused_id_error(a, known)


@runtime_checkable
class AnnotationStore(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def upsert(self, annotations: Sequence[Annotation]) -> None:
        """Insert or replace by (post_id, producer, version); idempotent. A store that
        keeps fingerprints raises PostIdReusedError for a different post under an id
        it holds (Annotation.content_fingerprint)."""
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
        stored = {pid: a.content_fingerprint for (pid, _, _), a in self.rows.items()
                  if a.content_fingerprint}
        refuse_reused_ids(annotations, stored)
        for annotation in annotations:
            previous = self.rows.get(annotation.key)
            if previous is not None:
                annotation.created_at = previous.created_at
            self.rows[annotation.key] = annotation

    async def get(self, post_id: str) -> list[Annotation]:
        return [a for (pid, _, _), a in sorted(self.rows.items()) if pid == post_id]
