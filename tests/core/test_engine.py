import asyncio
import os
import signal
import textwrap

import pytest

from grebe import constants as C
from grebe.app.engines import process_executor
from grebe.config import load_config
from grebe.core.engine import EngineDiedError, EngineStartError, ProcessExecutor
from grebe.core.engine_ipc import Results, Submit, decoder, pack_frame
from grebe.core.settings import BundleRecipe, EngineSettings
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

    def tuning(config):  # reports how the engine process tuned its runtime
        async def report(ctx):
            import gc

            ctx.output.labels.append(f"gc:{gc.get_threshold()[0]}")
            ctx.output.labels.append(f"frozen:{gc.get_freeze_count() > 0}")

        return PlanBundle(plans=[Plan("report", {"report": report}, eligibility="echo")])

    def only_once(config):  # the first engine starts, every later start fails
        import os
        from pathlib import Path

        marker = Path(config.plans["marker"])
        if marker.exists():
            os._exit(1)
        marker.write_text("started")
        return sharing(config)

    def sharing(config):
        # Each engine labels posts with its pid; "put:" texts are published to the
        # other engines, "get:" texts are labelled with every text this engine knows.
        import os

        known = set()
        bundle = PlanBundle(plans=[])
        publish = bundle.peers.channel("texts", known.add, str)

        async def remember(ctx):
            text = ctx.payload.post.text
            ctx.output.labels.append(f"pid:{os.getpid()}")
            if text.startswith("put:"):
                known.add(text)
                publish(text)
            else:
                ctx.output.labels.extend(sorted(known))

        bundle.plans = [Plan("remember", {"remember": remember}, eligibility="echo")]
        return bundle

    def from_label(label):  # a recipe builder with no config at all: core needs none
        async def tag(ctx):
            ctx.output.labels.append(label)

        return PlanBundle(plans=[Plan("tag", {"tag": tag}, eligibility="echo")])

    def busy_start(label):  # loading for longer than the stall limit, using CPU all along
        import time

        until = time.monotonic() + 3.0
        while time.monotonic() < until:
            sum(range(1000))
        return from_label(label)

    def stuck_start(label):  # waiting on something that will not come, using no CPU
        import time

        time.sleep(600)
        return from_label(label)

    class _SlowToStop:
        async def start(self):
            pass

        async def stop(self):
            await asyncio.sleep(3600)  # a model that will not let go

    def slow_stop(config):
        bundle = build_bundle(config)
        bundle.components = [_SlowToStop()]
        return bundle

    def flaky_start(config):
        import os
        from pathlib import Path

        marker = Path(config.plans["marker"])
        left = int(marker.read_text()) if marker.exists() else 0
        if left > 0:  # die while "loading models", as a replacement engine did in B1
            marker.write_text(str(left - 1))
            os._exit(1)
        return build_bundle(config)
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
    decoded = decoder.decode(pack_frame(Submit(items=list(enumerate(payloads))))[4:])
    assert decoded == Submit(items=list(enumerate(payloads)))
    result = TaskResult(payload_id="p", post_id="x", success=True,
                        plans={"echo": TaskStatus.SUCCESS})
    assert decoder.decode(pack_frame(Results(items=[(7, result)]))[4:]).items[0][1] == result


async def test_engine_runs_with_its_gc_thresholds_and_its_start_frozen(tmp_path, plans_module):
    """An engine collects young objects at ENGINE_GC_THRESHOLDS and keeps the objects of
    its start out of the collector's passes (core.engine_process.tune_engine)."""
    executor = process_executor(_config(tmp_path, f"{plans_module}:tuning"))
    await executor.start()
    try:
        result = await executor.submit(_payload(0))
    finally:
        await executor.stop()
    assert result.success, result.error
    assert sorted(result.labels) == sorted([f"gc:{C.ENGINE_GC_THRESHOLDS[0]}", "frozen:True"])


async def test_round_trip_through_two_engines(tmp_path, plans_module):
    executor = process_executor(_config(tmp_path, f"{plans_module}:build_bundle", processes=2))
    await executor.start()
    try:
        assert len(executor.pids) >= 1  # engine 0; engine 1 starts after it
        results = await asyncio.gather(*(executor.submit(_payload(i)) for i in range(600)))
        assert len(executor.pids) == 2
        assert [r.post_id for r in results] == [f"post{i}" for i in range(600)]
        assert all(r.success and r.plans == {"echo": TaskStatus.SUCCESS} for r in results)
        assert results[5].labels == ["seen:t5"]
        assert executor.in_flight == 0
    finally:
        await executor.stop()
    assert executor.pids == []


async def test_engines_build_their_plans_from_a_recipe_without_any_config(plans_module):
    """core's ProcessExecutor takes settings and a BundleRecipe (strings): the engine
    imports the builder by name and calls it with the argument."""
    executor = ProcessExecutor(
        EngineSettings(processes=1, concurrency=4),
        BundleRecipe(builder=f"{plans_module}:from_label", argument="from-the-recipe"),
    )
    await executor.start()
    try:
        results = await asyncio.gather(*(executor.submit(_payload(i)) for i in range(10)))
        assert all(r.success and r.labels == ["from-the-recipe"] for r in results)
    finally:
        await executor.stop()


async def test_a_recipe_naming_a_missing_builder_fails_the_start(plans_module):
    executor = ProcessExecutor(
        EngineSettings(processes=1), BundleRecipe(f"{plans_module}:no_such", "x")
    )
    with pytest.raises(EngineStartError, match="has no function 'no_such'"):
        await executor.start()


async def test_engine_that_cannot_start_reports_why(tmp_path, plans_module):
    executor = process_executor(_config(tmp_path, f"{plans_module}:broken"))
    with pytest.raises(EngineStartError, match="no model here"):
        await executor.start()


async def test_a_start_slower_than_the_stall_limit_succeeds_while_it_uses_cpu(plans_module):
    """A saturated machine makes an engine's start slow, not stuck: it is waited for
    while it keeps using CPU (here 3 s of it against a 1.5 s stall limit)."""
    executor = ProcessExecutor(
        EngineSettings(processes=1, start_stall_s=1.5, start_timeout_s=120),
        BundleRecipe(builder=f"{plans_module}:busy_start", argument="slow-but-busy"),
    )
    await executor.start()
    try:
        result = await executor.submit(_payload(1))
        assert result.success and result.labels == ["slow-but-busy"]
    finally:
        await executor.stop()


async def test_a_start_that_uses_no_cpu_is_given_up_naming_the_setting(plans_module):
    executor = ProcessExecutor(
        EngineSettings(processes=1, start_stall_s=1.5, start_timeout_s=120),
        BundleRecipe(builder=f"{plans_module}:stuck_start", argument="x"),
    )
    with pytest.raises(EngineStartError, match=r"no progress for \d+ s while starting .*"
                                               r"engine\.start_stall_s=1\.5"):
        await executor.start()
    assert executor.pids == []


async def test_a_start_past_the_whole_limit_is_given_up_naming_the_setting(plans_module):
    executor = ProcessExecutor(
        EngineSettings(processes=1, start_stall_s=60, start_timeout_s=1.0),
        BundleRecipe(builder=f"{plans_module}:busy_start", argument="x"),
    )
    with pytest.raises(EngineStartError, match=r"engine\.start_timeout_s=1"):
        await executor.start()


@pytest.mark.slow
async def test_engine_death_fails_its_futures_and_is_restarted(tmp_path, plans_module):
    deaths = []
    executor = process_executor(
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
        assert executor.failure is None
    finally:
        await executor.stop()


@pytest.mark.timeout(60)
async def test_an_unencodable_payload_fails_alone_not_its_batch(tmp_path, plans_module):
    """B5: a count past 64 bits once made the whole IPC batch fail to encode, so no post of
    it ever finished. The codec now refuses such posts; if one reaches the executor anyway
    (built in code), only its own future fails."""
    executor = process_executor(_config(tmp_path, f"{plans_module}:build_bundle"))
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


@pytest.mark.slow
async def test_replacements_dying_while_they_load_never_fail_the_waiting_posts(
    tmp_path, plans_module
):
    """B1: an engine died, then its replacement died while loading models: "giving up on
    engines" failed every parked post with ExecutorUnavailableError. Now restarts go on
    (with backoff) and the parked posts run on the engine that finally comes up."""
    marker = tmp_path / "start-deaths"
    config = load_config(
        data_dir=tmp_path, engine={"processes": 1}, output={"broker": "none"},
        store={"backend": "memory"},
        plans={"factory": f"{plans_module}:flaky_start", "marker": str(marker)},
    )
    executor = process_executor(config)
    await executor.start()
    try:
        (pid,) = executor.pids
        marker.write_text("3")  # the next three engines die during their start
        os.kill(pid, signal.SIGKILL)
        async with asyncio.timeout(10):
            while pid in executor.pids:  # noqa: ASYNC110  # until it has seen the death
                await asyncio.sleep(0.01)
        waiting = [executor.submit(_payload(i)) for i in range(20)]
        results = await asyncio.wait_for(asyncio.gather(*waiting), 60)
        assert all(r.success for r in results)
        assert marker.read_text() == "0"  # all three failed starts happened
        assert executor.failure is None
    finally:
        await executor.stop()


@pytest.mark.slow
async def test_stop_kills_engines_that_do_not_stop_within_the_timeout(tmp_path, plans_module):
    """B9: engines were given 10 s each after the drain window; stop(timeout_s) bounds
    the whole stop (all engines together)."""
    executor = process_executor(
        _config(tmp_path, f"{plans_module}:slow_stop", processes=2)
    )
    await executor.start()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await executor.stop(1.0)
    took = loop.time() - started
    assert took < 4.0, f"stop(1.0) took {took:.1f}s"
    assert executor.pids == []


@pytest.mark.slow
async def test_runtime_stop_returns_within_the_drain_window_plus_the_margin(
    tmp_path, plans_module
):
    """B9 at the level of `grebe run`: SIGTERM took drain_window_s + 10 s when an engine
    would not stop. Now: the window, plus SHUTDOWN_MARGIN_S, plus the sources' commit."""
    from grebe import constants as C
    from grebe.app.supervisor import Runtime

    config = load_config(
        data_dir=tmp_path, engine={"processes": 1, "drain_window_s": 1.0},
        plans={"factory": f"{plans_module}:slow_stop"}, output={"broker": "none"},
        store={"backend": "memory"}, metrics={"enabled": False},
        streams=[{"name": "posts", "eligibilities": ["hang"]}],
    )
    runtime = Runtime(config)
    await runtime.start()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await runtime.stop()
    took = loop.time() - started
    assert took < 1.0 + C.SHUTDOWN_MARGIN_S + 1.5, f"stop took {took:.1f}s"


def _by(author, i, text):
    return TaskPayload(payload_id=f"p{i}", post=Post(id=f"post{i}", author_id=author, text=text),
                       eligibilities=frozenset({"echo"}))


async def test_an_authors_posts_go_to_one_engine_and_authors_spread_over_both(
        tmp_path, plans_module):
    executor = process_executor(_config(tmp_path, f"{plans_module}:sharing", processes=2))
    await executor.start()
    try:
        posts = [_by(f"author{i % 40}", i, f"get:{i}") for i in range(400)]
        results = await asyncio.gather(*(executor.submit(p) for p in posts))
    finally:
        await executor.stop()
    engines_of: dict[str, set[str]] = {}
    for post, result in zip(posts, results, strict=True):
        engines_of.setdefault(post.post.author_id, set()).add(result.labels[0])
    assert all(len(pids) == 1 for pids in engines_of.values())
    per_engine = [sum(pids == {pid} for pids in engines_of.values())
                  for pid in {p for pids in engines_of.values() for p in pids}]
    assert len(per_engine) == 2 and min(per_engine) >= 10  # 40 authors, both engines used


async def test_what_one_engine_shares_reaches_the_other(tmp_path, plans_module):
    executor = process_executor(_config(tmp_path, f"{plans_module}:sharing", processes=2))
    await executor.start()
    try:
        puts = await asyncio.gather(*(executor.submit(_by(f"w{i}", i, f"put:{i}"))
                                      for i in range(20)))
        writers = {r.labels[0] for r in puts}
        assert len(writers) == 2  # both engines published
        # No wait: an engine sends its shares before the results they came with, and the
        # dispatcher relays them as it reads them, so they are ahead of any later Submit.
        gets = await asyncio.gather(*(executor.submit(_by(f"r{i}", 100 + i, "get:"))
                                      for i in range(20)))
    finally:
        await executor.stop()
    assert len({r.labels[0] for r in gets}) == 2
    every = sorted(f"put:{i}" for i in range(20))
    assert all(r.labels[1:] == every for r in gets)


async def test_an_engine_that_cannot_start_does_not_hold_its_authors_posts(
        tmp_path, plans_module):
    """Engine 1 starts after engine 0; while it starts its authors' posts wait for it,
    and when its start fails they go to engine 0 (it is retried meanwhile)."""
    config = load_config(
        data_dir=tmp_path, engine={"processes": 2}, output={"broker": "none"},
        plans={"factory": f"{plans_module}:only_once", "marker": str(tmp_path / "m")},
        store={"backend": "memory"})
    executor = process_executor(config)
    await executor.start()
    try:
        results = await asyncio.wait_for(asyncio.gather(
            *(executor.submit(_by(f"author{i}", i, f"get:{i}")) for i in range(40))), 60)
        assert all(r.success for r in results)
        assert len({r.labels[0] for r in results}) == 1  # all on engine 0
        assert executor.failure is not None and "engine 1" in executor.failure
    finally:
        await executor.stop()
