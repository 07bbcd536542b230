import asyncio
import os
import signal
import textwrap

import pytest

from grebe.config import load_config
from grebe.core.engine import (
    EngineDiedError,
    EngineStartError,
    ProcessExecutor,
    Results,
    Submit,
    _decoder,
    _frame,
)
from grebe.errors import DecodeError
from grebe.types import Post, TaskPayload, TaskResult, TaskStatus

# A plans factory the engine processes import by name (they inherit sys.path).
PLANS = textwrap.dedent(
    """
    import asyncio
    from grebe.core.bundle import PlanBundle
    from grebe.core.plan import Plan

    async def echo(ctx):
        ctx.output.labels.append("seen:" + ctx.payload.post.text)

    async def hang(ctx):
        await asyncio.sleep(3600)

    def build_bundle(config):
        return PlanBundle(plans=[
            Plan("echo", {"echo": echo}, eligibility="echo"),
            Plan("hang", {"hang": hang}, eligibility="hang", task_timeout_s=7200),
        ])

    def broken(config):
        raise RuntimeError("no model here")
    """
)


@pytest.fixture
def plans_module(tmp_path, monkeypatch):
    (tmp_path / "engine_test_plans.py").write_text(PLANS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "engine_test_plans"


def _config(tmp_path, factory, processes=1):
    return load_config(
        data_dir=tmp_path, engine={"processes": processes},
        plans={"factory": factory}, output={"broker": "none"}, store={"backend": "memory"},
    )


def _payload(i, eligibility="echo"):
    return TaskPayload(
        payload_id=f"p{i}", post=Post(id=f"post{i}", author_id="a", text=f"t{i}"),
        eligibilities=frozenset({eligibility}),
    )


def test_frames_round_trip_batches():
    payloads = [_payload(i) for i in range(3)]
    decoded = _decoder.decode(_frame(Submit(items=list(enumerate(payloads))))[4:])
    assert decoded == Submit(items=list(enumerate(payloads)))
    result = TaskResult(payload_id="p", post_id="x", success=True,
                        plans={"echo": TaskStatus.SUCCESS})
    assert _decoder.decode(_frame(Results(items=[(7, result)]))[4:]).items[0][1] == result


async def test_round_trip_through_two_engines(tmp_path, plans_module):
    executor = ProcessExecutor(_config(tmp_path, f"{plans_module}:build_bundle", processes=2))
    await executor.start()
    try:
        assert len(executor.pids) == 2
        results = await asyncio.gather(*(executor.submit(_payload(i)) for i in range(600)))
        assert [r.post_id for r in results] == [f"post{i}" for i in range(600)]
        assert all(r.success and r.plans == {"echo": TaskStatus.SUCCESS} for r in results)
        assert results[5].labels == ["seen:t5"]
        assert executor.in_flight == 0
    finally:
        await executor.stop()
    assert executor.pids == []


async def test_engine_that_cannot_start_reports_why(tmp_path, plans_module):
    executor = ProcessExecutor(_config(tmp_path, f"{plans_module}:broken"))
    with pytest.raises(EngineStartError, match="no model here"):
        await executor.start()


@pytest.mark.slow
async def test_engine_death_fails_its_futures_and_is_restarted(tmp_path, plans_module):
    deaths = []
    executor = ProcessExecutor(
        _config(tmp_path, f"{plans_module}:build_bundle"),
        on_engine_death=lambda index, code: deaths.append((index, code)),
    )
    await executor.start()
    try:
        (pid,) = executor.pids
        stuck = [executor.submit(_payload(i, "hang")) for i in range(5)]
        await asyncio.sleep(0.2)  # let the frame reach the engine
        os.kill(pid, signal.SIGKILL)
        for future in stuck:
            with pytest.raises(EngineDiedError):
                await asyncio.wait_for(future, 10)
        # Submitted while the engine restarts: parked, then run by the new engine.
        result = await asyncio.wait_for(executor.submit(_payload(99)), 30)
        assert result.success and result.labels == ["seen:t99"]
        assert deaths == [(0, -signal.SIGKILL)]
        assert executor.pids and executor.pids != [pid]
        assert not executor.failed.is_set()
    finally:
        await executor.stop()


@pytest.mark.timeout(60)
async def test_an_unencodable_payload_fails_alone_not_its_batch(tmp_path, plans_module):
    """B5: a count past 64 bits once made the whole IPC batch fail to encode, so no post of
    it ever finished. The codec now refuses such posts; if one reaches the executor anyway
    (built in code), only its own future fails."""
    executor = ProcessExecutor(_config(tmp_path, f"{plans_module}:build_bundle"))
    await executor.start()
    try:
        bad = TaskPayload(
            payload_id="bad", post=Post(id="big", author_id="a", like_count=10**30),
            eligibilities=frozenset({"echo"}),
        )
        futures = [executor.submit(_payload(0)), executor.submit(bad),
                   executor.submit(_payload(1))]
        results = await asyncio.gather(*futures, return_exceptions=True)
        assert isinstance(results[1], DecodeError)
        assert "unencodable" in str(results[1])
        assert [r.labels for r in (results[0], results[2])] == [["seen:t0"], ["seen:t1"]]
    finally:
        await executor.stop()
