"""A plans factory for the overload test: the real default flows and models, with the
text embedder slowed to SECONDS_PER_TEXT per text (a slowed model double beside the
real-model run), so a CI machine overloads the model the way a busy host did.
Imported by `grebe run` subprocesses through PYTHONPATH (tests/integration)."""

from __future__ import annotations

import os
import time
from typing import Any

from grebe.core.bundle import PlanBundle
from grebe.flows.registry import build_bundle as build_default_bundle

# 0.15 s a text: a 64-text batch computes for ~10 s. At 0.25 s (16 s a batch) a task that
# made two model calls in sequence outran the 30 s task limit inside the batches (110 of
# 800 dead-lettered); a payload in a running batch is now credited the other payloads'
# share of it (core/deadlines.py). GREBE_SLOW_MODEL_S=0.25 dead-letters 0 of 800 now, with
# or without that credit: these one-sentence posts no longer make two sequential calls.
SECONDS_PER_TEXT = float(os.environ.get("GREBE_SLOW_MODEL_S", "0.15"))


class _SlowEmbedder:
    """Started after the models: wraps the embedder's batch function with a sleep."""

    def __init__(self, embedder: Any) -> None:
        self._embedder = embedder

    async def start(self) -> None:
        batcher = self._embedder.batcher
        real = batcher._batch_fn

        def slowed(texts: list[str]) -> Any:
            time.sleep(SECONDS_PER_TEXT * len(texts))  # in the batcher's thread
            return real(texts)

        batcher._batch_fn = slowed

    async def stop(self) -> None:
        return None


def build_bundle(config: Any) -> PlanBundle:
    bundle = build_default_bundle(config)
    bundle.components = [*bundle.components, _SlowEmbedder(bundle.services.models.embedder)]
    return bundle
