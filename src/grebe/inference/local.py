"""The shared shape of a local model service: load off the loop, predict in batches.

A subclass says how to load its model (`_load`, run once in a thread by `start()`)
and how to score a list of inputs (`_predict`, run on the batcher's thread); this base
gives it the lifecycle, the micro-batching and input checks, so each backend module is
only its model-specific code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, ClassVar, Generic, TypeVar

from grebe.errors import InferenceError
from grebe.inference.batcher import MicroBatcher

In = TypeVar("In")
Out = TypeVar("Out")


class BatchedLocalModel(Generic[In, Out]):
    #: Batcher settings; override per class or pass `batching={...}` to __init__.
    default_batching: ClassVar[dict[str, Any]] = {"max_batch_size": 32, "max_wait_ms": 2.0}

    def __init__(self, *, name: str, batching: dict[str, Any] | None = None) -> None:
        self._name = name
        self._batching = {**self.default_batching, **(batching or {})}
        self.batcher: MicroBatcher[In, Out] | None = None

    @property
    def name(self) -> str:
        return self._name

    def _load(self) -> None:
        """Load weights (runs in a worker thread, once)."""
        raise NotImplementedError

    def _predict(self, items: list[In]) -> Sequence[Out]:
        """One result per item, in order (runs in the batcher's thread)."""
        raise NotImplementedError

    async def start(self) -> None:
        if self.batcher is not None:
            return
        await asyncio.to_thread(self._load)
        self.batcher = MicroBatcher(self._predict, name=self._name, **self._batching)
        await self.batcher.start()

    async def stop(self) -> None:
        if self.batcher is not None:
            await self.batcher.stop()
            self.batcher = None

    async def _submit_many(self, items: Sequence[In]) -> list[Out]:
        if self.batcher is None:
            raise InferenceError(f"{self._name}: called before start()")
        if not items:
            return []
        return await self.batcher.submit_many(items)


def check_texts(texts: Sequence[str], who: str) -> list[str]:
    """Texts as a list, or InferenceError for a bare string or non-string items."""
    if isinstance(texts, str):
        raise InferenceError(f"{who}: takes a sequence of strings, not one string")
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise InferenceError(f"{who}: items {bad[:5]} are not strings")
    return list(texts)
