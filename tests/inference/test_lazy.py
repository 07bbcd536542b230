"""Models loaded on first use (LazyService) and models started together (StartTogether)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from grebe.errors import ModelUnavailableError, is_system_fault
from grebe.inference.fakes import KeywordClassifier
from grebe.inference.lazy import LazySpamScorer, LazyTextClassifier, StartTogether, ensure_ready
from grebe.inference.spam_head import SpamHeadService


class Counting:
    """A builder that counts the backends it builds (and can fail on purpose)."""

    def __init__(self, fail: bool = False) -> None:
        self.built, self.fail = 0, fail

    def __call__(self) -> KeywordClassifier:
        self.built += 1
        if self.fail:
            raise OSError("model.onnx: no such file")
        return KeywordClassifier(["idiot"], label="offensive")


async def test_nothing_is_built_until_the_first_call_and_then_once() -> None:
    build = Counting()
    lazy = LazyTextClassifier(build, "kw")
    await lazy.start()
    assert build.built == 0 and lazy.loads == 0 and not lazy.loaded
    rows = await asyncio.gather(*(lazy.classify(["you idiot"]) for _ in range(5)))
    assert all(r == [{"offensive": 1.0}] for r in rows)
    assert build.built == 1 and lazy.loads == 1  # concurrent first calls share one load
    await lazy.stop()
    assert not lazy.loaded


async def test_a_failed_load_is_a_system_fault_and_is_not_retried_per_post() -> None:
    build = Counting(fail=True)
    lazy = LazyTextClassifier(build, "kw")
    for _ in range(3):
        with pytest.raises(ModelUnavailableError, match=r"kw failed to load: model\.onnx") as info:
            await lazy.classify(["hello"])
        assert is_system_fault(info.value)  # the post is retried, never judged without it
    assert build.built == 1  # remembered for LAZY_LOAD_RETRY_S


async def test_a_failed_load_is_tried_again_after_the_window(monkeypatch) -> None:
    from grebe import constants as C

    build = Counting(fail=True)
    lazy = LazyTextClassifier(build, "kw")
    with pytest.raises(ModelUnavailableError):
        await lazy.classify(["hello"])
    monkeypatch.setattr(C, "LAZY_LOAD_RETRY_S", 0.0)
    build.fail = False
    assert await lazy.classify(["idiot"]) == [{"offensive": 1.0}]
    assert build.built == 2


async def test_lazy_spam_head_loads_its_weights_on_ensure_ready() -> None:
    lazy = LazySpamScorer(SpamHeadService, "spam-head")
    assert lazy.name == "spam-head"
    await ensure_ready(lazy)
    assert lazy.name.startswith("spam-head:")  # the version read from the weights
    (p,) = lazy.score(np.zeros((1, 384), dtype=np.float32))
    assert 0.0 <= p <= 1.0
    await ensure_ready(KeywordClassifier(["x"]))  # an eager backend: nothing to do


class Meeting:
    """A component whose start() finishes only once every one of `n` has begun: a
    sequential start would never get past the first."""

    def __init__(self, gate: asyncio.Barrier, fail: bool = False) -> None:
        self.gate, self.fail, self.stopped = gate, fail, False

    async def start(self) -> None:
        await self.gate.wait()
        if self.fail:
            raise OSError("weights missing")

    async def stop(self) -> None:
        self.stopped = True


async def test_start_together_starts_in_parallel_and_stops_all() -> None:
    gate = asyncio.Barrier(3)
    parts = [Meeting(gate) for _ in range(3)]
    together = StartTogether([*parts, parts[0]])  # a model serving twice starts once
    assert len(together.parts) == 3
    await asyncio.wait_for(together.start(), 30)
    await together.stop()
    assert all(p.stopped for p in parts)


async def test_start_together_failure_is_a_start_error_and_stops_the_rest() -> None:
    gate = asyncio.Barrier(2)
    good, bad = Meeting(gate), Meeting(gate, fail=True)
    with pytest.raises(OSError, match="weights missing"):
        await asyncio.wait_for(StartTogether([good, bad]).start(), 30)
    assert good.stopped and not bad.stopped


async def test_a_caller_cancelled_during_the_load_does_not_abandon_it() -> None:
    gate = asyncio.Event()
    built: list[str] = []

    class Slow(KeywordClassifier):
        async def start(self) -> None:
            await gate.wait()

    def build() -> Slow:
        built.append("slow")
        return Slow(["idiot"], label="offensive")

    lazy = LazyTextClassifier(build, "slow")
    first = asyncio.ensure_future(lazy.classify(["idiot"]))
    await asyncio.sleep(0)  # the first call has started the load
    first.cancel()  # e.g. its task timed out
    with pytest.raises(asyncio.CancelledError):
        await first
    second = asyncio.ensure_future(lazy.classify(["idiot"]))
    gate.set()
    assert await asyncio.wait_for(second, 30) == [{"offensive": 1.0}]
    assert len(built) == 1 and lazy.loads == 1
