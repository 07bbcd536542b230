"""grebe.core.stall_watch: a stalled loop leaves every thread's stack on stderr, even
when the stalled thread holds the GIL; a loop that turns leaves nothing."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import asyncio, ctypes, sys
    from grebe.core.stall_watch import stall_watch

    def stuck_in_native_code() -> None:
        # libc's sleep through PyDLL keeps the GIL: no Python thread could report this.
        ctypes.PyDLL(None).sleep(3)

    async def main(stall: bool) -> None:
        async with stall_watch(stall_s=0.5 if stall else 5.0, every_s=0.1):
            if stall:
                stuck_in_native_code()
            else:
                await asyncio.sleep(1.5)

    asyncio.run(main(sys.argv[1] == "stall"))
""")


def _stderr(mode: str) -> str:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_stalled_loop_dumps_the_stacks() -> None:
    err = _stderr("stall")
    assert "Timeout (0:00:00.500000)!" in err
    assert "stuck_in_native_code" in err and "most recent call first" in err


def test_a_loop_that_turns_dumps_nothing() -> None:
    assert _stderr("turning") == ""
