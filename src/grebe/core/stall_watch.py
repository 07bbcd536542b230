"""A stalled event loop says where it stopped.

When the loop stops turning (blocked in native code, waiting for a GIL another thread will
never give back), nothing on the loop can report it, and a Python thread could not either
while the GIL is held. faulthandler's watchdog is a C thread that needs no GIL: the loop
re-arms it every `every_s`, and if the loop misses `stall_s` the watchdog writes every
thread's Python stack to stderr, once per stall. Issue 14's hang was only found with
py-spy attached by hand; the next one leaves its stacks in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import sys
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)

#: Longer than any legitimate pause of the loop (a lazy import of a model library at
#: load ~25 takes tens of seconds), short enough to be in the log of a run that hangs.
STALL_S = 120.0
#: How often the loop re-arms the watchdog (each re-arm starts a C thread: ~0.1 ms).
REARM_S = 5.0


@contextlib.asynccontextmanager
async def stall_watch(stall_s: float = STALL_S, every_s: float = REARM_S) -> AsyncIterator[None]:
    """While inside, a loop stalled for `stall_s` dumps all threads' stacks to stderr."""
    stderr = sys.__stderr__
    try:
        if stderr is None:
            raise OSError("no stderr")
        stderr.fileno()
    except (OSError, ValueError) as exc:  # io.UnsupportedOperation is an OSError
        log.debug("no stall watch: stderr has no file descriptor (%s)", exc)
        yield
        return

    async def rearm() -> None:
        while True:
            await asyncio.sleep(every_s)
            faulthandler.dump_traceback_later(stall_s, file=stderr)

    faulthandler.dump_traceback_later(stall_s, file=stderr)  # armed from the first moment

    task = asyncio.create_task(rearm(), name="loop-stall-watch")
    try:
        yield
    finally:
        task.cancel()
        faulthandler.cancel_dump_traceback_later()


async def watched(main: Awaitable[T]) -> T:
    """`main` under stall_watch(): what `grebe run` and each engine process run."""
    async with stall_watch():
        return await main
