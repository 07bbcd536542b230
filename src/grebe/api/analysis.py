"""POST /v1/analyze: one post through every enabled flow, answered in the response.

The flows' Analyzer (grebe.flows.analyze) loads its models on the first call, not at
start-up, so `grebe serve` is up in a second and a server that never analyses never
pays for the weights. Calls are capped (`api.analyze_concurrency`); the rest wait.
Media URLs go through the configured fetcher: remote callers cannot read local files
unless `media.fetch.allow_files` says so.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from grebe.config import GrebeConfig
from grebe.core.plan import PlanResult
from grebe.errors import GrebeError
from grebe.flows.analyze import Analyzer
from grebe.types import Annotation, Envelope, TaskPayload, UserContext

PAYLOAD_SOURCE = "api"


class AnalyzerUnavailableError(GrebeError):
    """The models could not be loaded; the next call tries again."""


class OnDemandAnalysis:
    """An Analyzer started on first use and shared by every later call."""

    def __init__(self, config: GrebeConfig) -> None:
        self._config = config
        self._analyzer: Analyzer | None = None
        self._starting = asyncio.Lock()
        self._slots = asyncio.Semaphore(config.api.analyze_concurrency)
        self.loaded_in_s: float | None = None

    @property
    def loaded(self) -> bool:
        return self._analyzer is not None

    async def _ready(self) -> Analyzer:
        async with self._starting:
            if self._analyzer is None:
                began = time.perf_counter()
                analyzer = Analyzer(self._config)
                try:
                    await analyzer.start()
                except Exception as exc:  # missing weights, a bad inference section...
                    raise AnalyzerUnavailableError(f"cannot load the flows' models: {exc}") from exc
                self.loaded_in_s = time.perf_counter() - began
                self._analyzer = analyzer
            return self._analyzer

    async def analyze(self, envelope: Envelope) -> dict[str, Any]:
        """The annotations the flows produce for the post, and each plan's outcome."""
        analyzer = await self._ready()
        payload = TaskPayload(
            payload_id=f"{PAYLOAD_SOURCE}:analyze:{time.time_ns()}", post=envelope.post,
            user=envelope.user, context=envelope.context or UserContext(),
            eligibilities=frozenset(analyzer.plan_names), source=PAYLOAD_SOURCE,
        )
        async with self._slots:
            began = time.perf_counter()
            results, annotations = await analyzer.run(payload)
            elapsed = time.perf_counter() - began
        return analysis_json(envelope.post.id, results, annotations, elapsed)

    async def stop(self) -> None:
        async with self._starting:
            analyzer, self._analyzer = self._analyzer, None
        if analyzer is not None:
            await analyzer.stop()


def analysis_json(post_id: str, results: list[PlanResult], annotations: list[Annotation],
                  elapsed_s: float) -> dict[str, Any]:
    plans: dict[str, Any] = {}
    for result in results:
        entry: dict[str, Any] = {
            "status": result.status.value, "version": result.version,
            "seconds": round(result.finished_at - result.started_at, 6),
        }
        if result.error:
            entry["error"] = result.error
        if result.skip_reasons:
            entry["skipped_because"] = next(iter(result.skip_reasons.values()))
        plans[result.plan] = entry
    return {
        "post_id": post_id,
        "annotations": annotations,
        "plans": plans,
        "elapsed_ms": round(elapsed_s * 1000, 3),
    }
