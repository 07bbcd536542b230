"""What `GET /v1/status` and the status page show: one snapshot of the running system.

Read from the objects that do the work (the dispatcher's counters, the sources' lag,
the executor's engines), never kept in a second set of books that could drift.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import time
from typing import TYPE_CHECKING, Any

import grebe
from grebe.core.executor import ReportsEngines
from grebe.core.source import ReportsLag

if TYPE_CHECKING:
    from grebe.api.service import ApiService
    from grebe.core.source import Source

log = logging.getLogger(__name__)

LAG_TIMEOUT_S = 1.0  # a broker slow to answer shows "?" rather than stalling the page


async def source_lag(source: Source) -> int | None:
    """Messages the source holds that were not handed out yet; None if unknown."""
    if not isinstance(source, ReportsLag):
        return None
    try:
        async with asyncio.timeout(LAG_TIMEOUT_S):
            value = source.lag()
            if inspect.isawaitable(value):
                value = await value
        return int(value)
    except Exception:
        log.warning("lag() of stream %s failed", source.name, exc_info=True)
        return None


def engines_json(service: ApiService) -> dict[str, Any]:
    executor = service.runtime.executor
    configured = service.config.engine.process_count
    if executor is None:
        return {"mode": "processes" if configured else "inline", "configured": configured,
                "alive": 0, "pids": [], "failure": None}
    if not isinstance(executor, ReportsEngines):  # plans run inside this process
        return {"mode": "inline", "configured": 0, "alive": 1, "pids": [], "failure": None}
    pids = executor.pids
    return {"mode": "processes", "configured": configured, "alive": len(pids),
            "pids": list(pids), "failure": executor.failure}


async def snapshot(service: ApiService) -> dict[str, Any]:
    runtime = service.runtime
    sources = {s.name: s for s in runtime.sources}
    names = [s.name for s in service.config.streams]
    lags = await asyncio.gather(
        *(source_lag(sources[n]) if n in sources else asyncio.sleep(0, None) for n in names)
    )
    streams = [
        {"name": s.name, "broker": s.broker, "topic": s.topic,
         "eligibilities": list(s.eligibilities), "weight": s.weight, "max_qps": s.max_qps,
         "lag": lag}
        for s, lag in zip(service.config.streams, lags, strict=True)
    ]
    dispatcher = runtime.dispatcher
    counts: dict[str, Any] = (
        {**dataclasses.asdict(dispatcher.stats), "in_flight": dispatcher.in_flight}
        if dispatcher is not None else {}
    )
    return {
        "version": grebe.__version__,
        "state": service.state,
        "started_at": service.started_at,
        "uptime_s": round(service.uptime_s, 3),
        "now": time.time(),
        "streams": streams,
        "dispatcher": counts,
        "engines": engines_json(service),
        "api": {
            "intake_stream": service.intake.stream.name if service.intake else None,
            **service.counts,
            "analyzer_loaded": service.analysis.loaded,
        },
    }
