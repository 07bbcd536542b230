"""The running parts behind the API and their lifecycle, apart from HTTP so tests (and
any other front end) drive the same object: the pipeline (core Runtime), the intake
that appends submitted posts, the annotation store it reads, the on-demand analyzer.

Stopping is two-phase like `grebe run`: `drain()` first refuses new posts (readyz turns
503) and then lets the Runtime drain in-flight work; `close()` releases the rest.
"""

from __future__ import annotations

import logging
import time
from enum import StrEnum
from typing import Any

from prometheus_client import CollectorRegistry

from grebe.api.analysis import OnDemandAnalysis
from grebe.api.intake import Intake, build_intake, intake_stream
from grebe.api.metrics import ApiMetrics
from grebe.app.supervisor import Runtime
from grebe.config import GrebeConfig
from grebe.core.executor import ReportsEngines
from grebe.stores.base import AnnotationStore
from grebe.stores.factory import build_store

log = logging.getLogger(__name__)


class State(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    DRAINING = "draining"
    STOPPED = "stopped"


class ApiService:
    def __init__(self, config: GrebeConfig) -> None:
        self.config = config
        self.registry = CollectorRegistry()
        # The runtime records its metrics in our registry; /metrics serves it.
        self.runtime = Runtime(config, registry=self.registry, serve_metrics=False)
        self.metrics = ApiMetrics(self.registry)
        self.analysis = OnDemandAnalysis(config)
        self.intake: Intake | None = None
        self.store: AnnotationStore | None = None
        self.state = State.STARTING
        self.started_at: float | None = None
        self._started_monotonic: float | None = None
        self.drained: bool | None = None

    @property
    def uptime_s(self) -> float:
        return 0.0 if self._started_monotonic is None else (
            time.monotonic() - self._started_monotonic)

    @property
    def counts(self) -> dict[str, Any]:
        return self.metrics.totals()

    async def start(self) -> None:
        """Store, intake, then the pipeline; on any failure what started is released."""
        intake_stream(self.config)  # a wrong api.stream fails before anything opens
        try:
            self.store = build_store(self.config)
            await self.store.start()
            self.intake = build_intake(self.config)
            await self.intake.start()
            await self.runtime.start()
        except BaseException:
            await self.close()
            raise
        self.state = State.RUNNING
        self.started_at = time.time()
        self._started_monotonic = time.monotonic()

    def unready_reason(self) -> str | None:
        """Why the service should not get traffic now; None when it should."""
        if self.state is not State.RUNNING:
            return f"state is {self.state}"
        # Engines are restarted until one is up (a system fault pauses intake meanwhile).
        executor = self.runtime.executor
        if isinstance(executor, ReportsEngines) and executor.failure is not None:
            return f"engines down, restarting: {executor.failure}"
        dispatching = self.runtime.dispatching
        if dispatching is not None and dispatching.done():
            return "the dispatcher exited"
        return None

    @property
    def accepting(self) -> bool:
        return self.state is State.RUNNING

    async def drain(self, drain_window_s: float | None = None) -> bool:
        """Stop taking posts, then stop the pipeline within the drain window; True when
        everything in flight finished (the rest is redelivered on restart)."""
        if self.state in (State.DRAINING, State.STOPPED):
            return bool(self.drained)
        self.state = State.DRAINING
        try:
            self.drained = await self.runtime.stop(drain_window_s)
        finally:
            self.state = State.STOPPED
        return self.drained

    async def close(self) -> None:
        if self.state is not State.STOPPED:
            await self.drain()
        for what, part in (("intake", self.intake), ("store", self.store),
                           ("analyzer", self.analysis)):
            if part is None:
                continue
            try:
                await part.stop()
            except Exception:
                log.exception("stopping the %s failed", what)
        self.intake = self.store = None
