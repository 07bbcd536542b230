"""grebe.core.spawn: children started without fork(), on uvloop and on asyncio's own loop."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop

from grebe.core.spawn import DEVNULL, PIPE, spawn

Runner = Callable[[Coroutine[Any, Any, Any]], Any]
LOOPS = pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])


@LOOPS
def test_communicate_feeds_stdin_and_reads_both_outputs(run: Runner) -> None:
    async def main() -> tuple[bytes, bytes, int | None]:
        child = await spawn(sys.executable, "-c",
                            "import sys; data = sys.stdin.buffer.read(); "
                            "sys.stdout.buffer.write(data[::-1]); sys.stderr.write('done'); "
                            "sys.exit(3)", stdin=PIPE, stdout=PIPE, stderr=PIPE)
        out, err = await child.communicate(b"x" * 300_000 + b"end")  # past a pipe's buffer
        return out, err, child.returncode

    out, err, code = run(main())
    assert out == b"dne" + b"x" * 300_000 and err == b"done" and code == 3


@LOOPS
def test_lines_are_read_as_the_child_writes_them(run: Runner) -> None:
    async def main() -> list[bytes]:
        child = await spawn(sys.executable, "-c", "print('ready', flush=True); input()",
                            stdin=PIPE, stdout=PIPE)
        assert child.stdin is not None and child.stdout is not None
        first = await child.stdout.readline()  # the child is still running, waiting
        child.stdin.write(b"go\n")
        await child.stdin.drain()
        rest = await child.stdout.readline()
        assert await child.wait() == 0
        return [first, rest]

    assert run(main()) == [b"ready\n", b""]


@LOOPS
def test_a_killed_child_is_reaped_and_cannot_be_signalled_again(run: Runner) -> None:
    async def main() -> tuple[int, int, int]:
        child = await spawn("sleep", "60", stdout=DEVNULL)
        assert child.returncode is None
        child.kill()
        code = await child.wait()
        with pytest.raises(ProcessLookupError):
            child.send_signal(signal.SIGTERM)
        return child.pid, code, await child.wait()  # waiting again gives the same code

    pid, code, again = run(main())
    assert code == again == -signal.SIGKILL
    assert not Path(f"/proc/{pid}").exists()  # reaped: no zombie left


@LOOPS
def test_passed_descriptors_reach_the_child(run: Runner) -> None:
    async def main() -> bytes:
        ours, theirs = socket.socketpair()
        with ours, theirs:
            child = await spawn(sys.executable, "-c",
                                f"import os; os.write({theirs.fileno()}, b'hello')",
                                pass_fds=[theirs.fileno()])
            assert await child.wait() == 0
            return ours.recv(16)

    assert run(main()) == b"hello"


@LOOPS
def test_a_program_that_cannot_start_is_an_os_error(run: Runner) -> None:
    async def main() -> None:
        await spawn("/no/such/program")

    with pytest.raises(FileNotFoundError):
        run(main())


def _open_descriptors() -> set[str]:
    found = set()
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):  # the listing's own descriptor, gone by now
            found.add(f"{fd.name}:{fd.readlink()}")
    return found


@LOOPS
def test_no_descriptor_is_left_behind(run: Runner) -> None:
    """Every stream is closed on the loop when it ends: none waits for garbage collection
    (uvloop kept a pipe's descriptor open after its end, then closed it a second time
    from the file object: by then another thread's descriptor, seen as EBADF in
    subprocess)."""

    async def main() -> set[str]:
        async def children() -> None:
            child = await spawn(sys.executable, "-c", "import sys; print(sys.stdin.read())",
                                stdin=PIPE, stdout=PIPE, stderr=PIPE)
            assert await child.communicate(b"hi") == (b"hi\n", b"")
            lines = await spawn("echo", "a", stdin=DEVNULL, stdout=PIPE)
            assert lines.stdout is not None and await lines.stdout.readline() == b"a\n"
            await lines.wait()

        await children()  # descriptors the loop opens on first use exist from here on
        before = _open_descriptors()
        for _ in range(20):
            await children()
        await asyncio.sleep(0.1)  # closing callbacks run on the next turns of the loop
        return _open_descriptors() - before

    assert run(main()) == set()
