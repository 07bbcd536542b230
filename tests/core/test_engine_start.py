"""Waiting for a starting engine while it makes progress (grebe.core.engine_start), with
a CPU clock the test moves: progress extends the wait, a stall or the whole limit ends it."""

from __future__ import annotations

import asyncio
import os

import pytest

from grebe.core.engine_start import EngineStartTimeout, await_while_progressing, process_cpu_s


class Cpu:
    """A process's CPU seconds, advanced by each read while `busy`."""

    def __init__(self, busy: bool) -> None:
        self.busy, self.seconds = busy, 0.0

    def __call__(self, pid: int) -> float:
        if self.busy:
            self.seconds += 0.01
        return self.seconds


async def frame_after(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "ready"


async def test_progress_extends_the_wait_past_the_stall_limit() -> None:
    got = await await_while_progressing(frame_after(0.5), 1, stall_s=0.15, limit_s=30,
                                        poll_s=0.02, cpu_of=Cpu(busy=True))
    assert got == "ready"


async def test_no_progress_for_the_stall_limit_gives_up_and_cancels_the_wait() -> None:
    waiting = asyncio.ensure_future(frame_after(30))
    with pytest.raises(EngineStartTimeout, match=r"no progress .*engine\.start_stall_s=0\.15"):
        await await_while_progressing(waiting, 1, stall_s=0.15, limit_s=30, poll_s=0.02,
                                      cpu_of=Cpu(busy=False))
    assert waiting.cancelled()


async def test_the_whole_limit_holds_even_with_progress() -> None:
    with pytest.raises(EngineStartTimeout, match=r"engine\.start_timeout_s=0\.2"):
        await await_while_progressing(frame_after(30), 1, stall_s=30, limit_s=0.2,
                                      poll_s=0.02, cpu_of=Cpu(busy=True))


async def test_where_cpu_cannot_be_read_the_stall_limit_is_a_plain_limit() -> None:
    with pytest.raises(EngineStartTimeout, match="CPU unknown"):
        await await_while_progressing(frame_after(30), 1, stall_s=0.15, limit_s=30,
                                      poll_s=0.02, cpu_of=lambda pid: None)


def test_reads_this_process_cpu() -> None:
    before = process_cpu_s(os.getpid())
    assert before is not None
    sum(range(3_000_000))
    after = process_cpu_s(os.getpid())
    assert after is not None and after >= before
    assert process_cpu_s(2**22 + 12345) is None  # no such process
