"""The status page and readyz learn about engine processes through the `ReportsEngines`
protocol (isinstance), not by probing the executor for attribute names."""

from __future__ import annotations

import asyncio

from grebe.api.service import ApiService, State
from grebe.api.status import engines_json
from grebe.app.engines import process_executor
from grebe.core.executor import InlineExecutor, ReportsEngines
from grebe.types import TaskPayload, TaskResult


class _EnginesDown:
    """An executor double whose engines are down: what readyz and /v1/status must show."""

    failure: str | None = "engine 0 failed to start: boom"

    @property
    def pids(self) -> list[int]:
        return [4242]

    def submit(self, payload: TaskPayload) -> asyncio.Future[TaskResult]:
        raise NotImplementedError

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class _PidsOnly:
    """Has `pids` but no `failure`: half the protocol is not the capability."""

    pids = (1,)


def test_the_process_executor_reports_engines_and_the_inline_one_does_not(config_for) -> None:
    # Constructed, not started: no process is spawned.
    assert isinstance(process_executor(config_for(engine={"processes": 1})), ReportsEngines)
    assert not isinstance(InlineExecutor(runner=None), ReportsEngines)  # type: ignore[arg-type]
    assert not isinstance(_PidsOnly(), ReportsEngines)


def test_status_and_readiness_read_engines_through_the_protocol(config_for) -> None:
    service = ApiService(config_for(engine={"processes": 2}))
    service.runtime.executor = _EnginesDown()
    assert engines_json(service) == {
        "mode": "processes", "configured": 2, "alive": 1, "pids": [4242],
        "failure": "engine 0 failed to start: boom"}
    service.state = State.RUNNING
    assert service.unready_reason() == "engines down, restarting: engine 0 failed to start: boom"

    service.runtime.executor = _PidsOnly()  # type: ignore[assignment]
    assert engines_json(service)["mode"] == "inline"
    assert service.unready_reason() is None
