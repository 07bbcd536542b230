"""`grebe run`: assemble sources, engines, dispatcher and metrics; shut down in two phases.

Shutdown. The first SIGINT/SIGTERM stops intake and drains: the dispatcher waits up to
`engine.drain_window_s` for in-flight posts to finish and ack (returning as soon as
none is left); then the engines stop and every source commits what finished. Anything
unfinished stays uncommitted and is redelivered on restart. A second signal exits at
once: nothing more is acked, so nothing unfinished is lost either.

The supervisor builds sources through `grebe.brokers.factory` and plans through the
configured bundle factory (grebe.app.bundles), so it names no broker, store or flow
itself; it hands core only settings dataclasses and a bundle recipe.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from grebe import constants as C
from grebe.app.bundles import build_bundle
from grebe.app.coverage import verify as verify_coverage
from grebe.app.engines import process_executor
from grebe.app.settings import dispatcher_settings, stream_settings
from grebe.brokers.factory import build_source
from grebe.config import GrebeConfig, StreamConfig
from grebe.core.bundle import PlanBundle
from grebe.core.dispatcher import Dispatcher, Stream
from grebe.core.engine import ProcessExecutor
from grebe.core.engine_process import tune_gc
from grebe.core.executor import Executor, InlineExecutor
from grebe.core.metrics import DispatcherMetrics, NullMetrics, PrometheusMetrics
from grebe.core.ratelimit import limiter_uri
from grebe.core.signals import ShutdownSignals
from grebe.core.source import ReportsCommitted, ReportsDrained, Source, can_report_caught_up
from grebe.core.stall_watch import watched
from grebe.errors import ConfigError, GrebeError

log = logging.getLogger(__name__)


SourceFactory = Callable[[StreamConfig, GrebeConfig], Source]


class Runtime:
    """The running system: start() it, stop() it. `grebe run`, the demo and the tests
    all drive this one object."""

    def __init__(
        self, config: GrebeConfig, *, source_factory: SourceFactory | None = None,
        registry: CollectorRegistry | None = None, serve_metrics: bool = True,
    ):
        """`serve_metrics=False`: metrics are still recorded in `registry`, but no metrics
        HTTP server is started, because the caller serves the registry (`grebe serve`)."""
        self.config = config
        self._source_factory = source_factory
        self._serve_metrics = serve_metrics
        self.registry = registry or CollectorRegistry()
        self.sources: list[Source] = []
        self.executor: Executor | None = None
        self.dispatcher: Dispatcher | None = None
        self.metrics_port: int | None = None
        self._bundle: PlanBundle | None = None  # only when plans run in this process
        self._dispatching: asyncio.Task[None] | None = None
        self._metrics_server: Any = None

    async def start(self) -> None:
        config = self.config
        verify_coverage(config)  # before any source opens: a config that does nothing fails
        try:
            for stream in config.streams:
                source = self._build_source(stream)
                await source.start()
                self.sources.append(source)
            self.executor = await self._start_executor()
            metrics: DispatcherMetrics = NullMetrics()
            if config.metrics.enabled:
                metrics = PrometheusMetrics(self.registry)
            if config.metrics.enabled and self._serve_metrics:
                try:
                    self._metrics_server, _ = start_http_server(
                        config.metrics.port, addr=config.metrics.host, registry=self.registry
                    )
                except OSError as exc:
                    raise ConfigError(
                        f"metrics.port {config.metrics.port}: cannot listen ({exc})"
                    ) from exc
                self.metrics_port = self._metrics_server.server_port
                log.info(
                    "metrics on http://%s:%d/metrics", config.metrics.host, self.metrics_port
                )
            streams = [
                Stream(source, stream_settings(stream))
                for source, stream in zip(self.sources, config.streams, strict=True)
            ]
            self.dispatcher = Dispatcher(
                streams, self.executor, dispatcher_settings(config.dispatcher),
                metrics=metrics,
                limiter_storage=limiter_uri(config.rate_limits.storage, config.redis.url),
                limiter_namespace=config.redis.namespace,
            )
        except BaseException:
            await self._close()
            raise
        self._dispatching = asyncio.create_task(self.dispatcher.run(), name="dispatcher")
        log.info(
            "running: %d stream(s), %d engine process(es)", len(self.sources),
            config.engine.process_count,
        )

    def _build_source(self, stream: StreamConfig) -> Source:
        factory = self._source_factory or build_source
        return factory(stream, self.config)

    async def _start_executor(self) -> Executor:
        config = self.config
        if config.engine.process_count >= 1:
            executor: Executor = process_executor(config)
        else:
            self._bundle = build_bundle(config)
            await self._bundle.start()
            master = self._bundle.master()
            executor = InlineExecutor(master, config.engine.concurrency)
        await executor.start()
        return executor

    @property
    def dispatching(self) -> asyncio.Task[None] | None:
        return self._dispatching

    async def stop(self, drain_window_s: float | None = None) -> bool:
        """Two-phase stop; True when every in-flight post finished within the window.

        Returns within the window plus C.SHUTDOWN_MARGIN_S (and the sources' final
        commit): engines get what is left of the window, at least the margin, to stop
        cleanly, and are killed past it."""
        window = self.config.engine.drain_window_s if drain_window_s is None else drain_window_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + window
        drained = True
        if self.dispatcher is not None:
            drained = await self.dispatcher.stop(window)
        if self._dispatching is not None:
            try:
                await self._dispatching
            except Exception:
                log.exception("the dispatcher failed")
        await self._close(max(deadline - loop.time(), 0.0) + C.SHUTDOWN_MARGIN_S)
        return drained

    async def _close(self, engine_timeout_s: float = C.ENGINE_STOP_TIMEOUT_S) -> None:
        """Stop engines (killed past `engine_timeout_s`), then sources (their final
        commit), then the rest."""
        if self.executor is not None:
            executor = self.executor
            if isinstance(executor, ProcessExecutor):
                await _quietly("executor", lambda: executor.stop(engine_timeout_s))
            else:
                await _quietly("executor", executor.stop)
            self.executor = None
        if self._bundle is not None:
            await _quietly("plan bundle", self._bundle.stop)
            self._bundle = None
        for source in self.sources:
            await _quietly(f"source {source.name}", source.stop)
        self.sources = []
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
            self._metrics_server = None

    def cannot_report_caught_up(self) -> list[str]:
        """Names of the sources that cannot tell when they are caught up."""
        return [s.name for s in self.sources if not can_report_caught_up(s)]

    async def wait_caught_up(self) -> None:
        """Wait until every source has committed everything its topic held when this
        was called (for batch jobs: the demo, `grebe run --exit-when-done`); a queue
        (RabbitMQ) has no offsets: until it is drained and nothing is in hand."""
        targets = []
        for source in self.sources:
            if not can_report_caught_up(source):
                raise GrebeError(f"source {source.name} cannot report when it is caught up")
            if isinstance(source, ReportsDrained):
                targets.append(source.wait_drained())
            elif isinstance(source, ReportsCommitted):
                targets.append(source.wait_committed(await source.end_offsets()))
        await asyncio.gather(*targets)


async def _quietly(what: str, stop: Callable[[], Any]) -> None:
    try:
        await stop()
    except Exception:
        log.exception("stopping the %s failed", what)


async def serve(config: GrebeConfig, *, exit_when_done: bool = False) -> int:
    """Run until a signal (or, with exit_when_done, until the input is consumed);
    returns the process exit code (grebe.constants.EXIT_*)."""
    with ShutdownSignals("stopping intake, draining in-flight posts") as signals:
        runtime = Runtime(config)
        try:
            await runtime.start()
        except GrebeError as exc:
            log.error("cannot start: %s", exc)
            return C.EXIT_FAILED
        tune_gc()
        if exit_when_done and (blind := runtime.cannot_report_caught_up()):
            log.error("--exit-when-done: source(s) %s cannot report when they are caught "
                      "up; run without it", ", ".join(blind))
            await runtime.stop(0.0)
            return C.EXIT_FAILED
        waits: dict[asyncio.Future[Any], str] = {
            asyncio.ensure_future(signals.requested.wait()): "signal",
        }
        if runtime.dispatching is not None:
            waits[runtime.dispatching] = "dispatcher exited"
        if exit_when_done:
            waits[asyncio.ensure_future(runtime.wait_caught_up())] = "done"
        finished, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        reasons = sorted(waits[f] for f in finished)
        for future in finished:  # "done" that raised is a failure, not done
            if waits[future] == "done" and (error := future.exception()) is not None:
                log.error("--exit-when-done: cannot tell when caught up: %s", error)
                reasons[reasons.index("done")] = "caught-up check failed"
        for future in waits:
            if future not in finished and future is not runtime.dispatching:
                future.cancel()
        log.info("stopping: %s", ", ".join(reasons))
        drained = await runtime.stop()
    if {"dispatcher exited", "caught-up check failed"} & set(reasons):
        return C.EXIT_FAILED
    return C.EXIT_OK if drained else C.EXIT_NOT_DRAINED

def run(config: GrebeConfig, *, exit_when_done: bool = False) -> int:
    """Blocking entry point of `grebe run` (uvloop when installed)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(watched(serve(config, exit_when_done=exit_when_done)))
    return uvloop.run(watched(serve(config, exit_when_done=exit_when_done)))
