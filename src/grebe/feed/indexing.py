"""Keep the ANN index in step with the annotation store.

`IndexingStore` wraps any AnnotationStore: every upsert that carries an embedding is
also added to the index, so the flows' sink (which writes annotations) keeps the
feed's out-of-network retrieval fresh without knowing it exists. `backfill` rebuilds
the index for known post ids after a restart (the index lives in memory).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from grebe.feed.ann import PostANNIndex
from grebe.stores.base import AnnotationStore
from grebe.types import Annotation


def embedding_of(annotations: Sequence[Annotation], producer: str | None) -> list[float] | None:
    """The post's embedding: the given producer's, else the newest annotation's with one."""
    best: Annotation | None = None
    for annotation in annotations:
        if annotation.embedding is None:
            continue
        if producer is not None and annotation.producer != producer:
            continue
        if best is None or annotation.updated_at > best.updated_at:
            best = annotation
    return best.embedding if best is not None else None


def index_embedding(
    index: PostANNIndex, post_id: str, annotations: Sequence[Annotation], producer: str | None
) -> bool:
    """Add the post's embedding to the index; False when it has none of the index's
    dimension (another embedder's vector is skipped, not an error)."""
    vector = embedding_of(annotations, producer)
    if vector is None or len(vector) != index.dim:
        return False
    index.add(post_id, vector)
    return True


class IndexingStore:
    """An AnnotationStore that also indexes embeddings it is given."""

    def __init__(
        self, store: AnnotationStore, index: PostANNIndex, producer: str | None = None,
        on_write: Callable[[list[str]], None] | None = None,
    ) -> None:
        self.store = store
        self.index = index
        self.producer = producer
        self.on_write = on_write  # told the post ids written (the feature cache drops them)

    async def start(self) -> None:
        await self.store.start()

    async def stop(self) -> None:
        await self.store.stop()

    async def upsert(self, annotations: Sequence[Annotation]) -> None:
        await self.store.upsert(annotations)
        # One index call for the batch (a call per post was most of a bulk load's
        # time); a post written twice in the batch keeps its last embedding.
        vectors: dict[str, list[float]] = {}
        for annotation in annotations:
            vector = embedding_of([annotation], self.producer)
            if vector is not None and len(vector) == self.index.dim:
                vectors.pop(annotation.post_id, None)
                vectors[annotation.post_id] = vector
        if vectors:
            self.index.add_many(list(vectors), list(vectors.values()))
        if self.on_write is not None:
            self.on_write([a.post_id for a in annotations])

    async def get(self, post_id: str) -> list[Annotation]:
        return await self.store.get(post_id)


async def backfill(
    index: PostANNIndex, store: AnnotationStore, post_ids: Iterable[str],
    producer: str | None = None,
) -> int:
    """Index the stored embeddings of `post_ids`; returns how many were added."""
    added = 0
    for post_id in post_ids:
        added += index_embedding(index, post_id, await store.get(post_id), producer)
    return added
