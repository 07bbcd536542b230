"""Waiting for a starting engine's first frame, for as long as it makes progress.

An engine's start is imports and model loading: ~1-2 s of CPU. On a saturated machine
the same CPU takes much longer in wall time (start-up stretched to 23-49 s at load ~15,
and past the old fixed 60 s limit under `nice`: the runtime then gave up although the
engine was only slow, docs/benchmarks.md "Media at volume"). So the limit that counts is
*progress*: an engine that keeps burning CPU is loading, and is given time; one that
has used no CPU for `stall_s` is stuck (a deadlock, a lock held by a dead process, a
wait on something that will not come) and is given up with a message that says so.
`limit_s` bounds the whole start all the same (a builder looping forever is progress
that never ends).

Progress is the process's CPU time (Linux /proc/<pid>/stat). Where that cannot be read,
the stall limit is a plain limit from the start, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from grebe import constants as C

T = TypeVar("T")

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class EngineStartTimeout(TimeoutError):
    """The engine did not send its first frame: stalled, or past the whole limit."""


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process, None where /proc cannot tell."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return None


async def await_while_progressing(
    first_frame: Awaitable[T], pid: int, *, stall_s: float, limit_s: float,
    poll_s: float = C.ENGINE_START_POLL_S,
    cpu_of: Callable[[int], float | None] = process_cpu_s,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """`first_frame`'s result, waiting while process `pid` uses CPU. Raises
    EngineStartTimeout after `stall_s` without progress or `limit_s` in all (the
    awaitable is cancelled then)."""
    waiting = asyncio.ensure_future(first_frame)
    started = last_progress = clock()
    last_cpu = cpu_of(pid)
    try:
        while True:
            now = clock()
            wait = min(poll_s, max(0.0, started + limit_s - now),
                       max(0.0, last_progress + stall_s - now))
            done, _ = await asyncio.wait({waiting}, timeout=wait)
            if done:
                return waiting.result()
            now = clock()
            cpu = cpu_of(pid)
            if cpu is not None and last_cpu is not None and cpu > last_cpu:
                last_progress = now
            last_cpu = cpu if cpu is not None else last_cpu
            used = f"{last_cpu:.1f} s CPU" if last_cpu is not None else "CPU unknown"
            if now - started >= limit_s:
                raise EngineStartTimeout(
                    f"not ready after {now - started:.0f} s ({used}), the limit "
                    f"engine.start_timeout_s={limit_s:g}")
            if now - last_progress >= stall_s:
                raise EngineStartTimeout(
                    f"no progress for {now - last_progress:.0f} s while starting ({used} in "
                    f"{now - started:.0f} s), the limit engine.start_stall_s={stall_s:g}")
    finally:
        if not waiting.done():
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # given up on
                await waiting
