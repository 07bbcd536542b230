"""Child processes for async code, started without fork().

uvloop (which `grebe run`, its engines and `grebe serve` use) starts a child process
with libuv's plain fork(), and fork() runs every library's pthread_atfork handlers in the
forking thread. OpenBLAS's handler shuts its thread pool down, even while another thread
is inside a BLAS call: that call then waits for ever on the pool's workers (Whisper's
feature extractor in a thread spun in `exec_blas`, so every post with speech timed out), or
the handler itself blocks, holding the GIL, and the whole process stops (children exit and
are never reaped, SIGTERM is never handled). Any process that runs models in threads
while it starts decoders, tesseract or engines is exposed; see docs/media.md.

`spawn()` starts the child with Python's subprocess module instead, which uses vfork or
posix_spawn: no atfork handler runs and nothing of the parent is copied. Its pipes are
the loop's streams, and its exit is seen through a pidfd on the loop (no SIGCHLD
handler, no waiter thread), so the same code runs on uvloop and on asyncio's own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import threading
from collections.abc import Collection, Mapping
from typing import IO, Any

#: For stdin/stdout/stderr: what subprocess takes (PIPE gives the loop a stream).
PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL

#: asyncio's default StreamReader limit (a line longer than this is an error).
_STREAM_LIMIT = 2**16


class Child:
    """A running child process: `stdin` (StreamWriter), `stdout`/`stderr` (StreamReader)
    where PIPE was asked for, `await wait()`, `kill()`; like asyncio.subprocess.Process."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None
        self._exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    async def wait(self) -> int:
        """The exit code once the child has exited (negative: killed by that signal)."""
        return await asyncio.shield(self._exited)

    def send_signal(self, signum: int) -> None:
        """Raises ProcessLookupError once the child has exited (as asyncio's does)."""
        if self._popen.returncode is not None:
            raise ProcessLookupError(self.pid)
        self._popen.send_signal(signum)

    def terminate(self) -> None:
        self.send_signal(15)

    def kill(self) -> None:
        self.send_signal(9)

    async def communicate(self, input: bytes | None = None) -> tuple[bytes, bytes]:
        """Write `input` to stdin and close it, read stdout and stderr to their ends,
        then wait for the exit; (b'', b'') for streams that are not pipes."""

        async def feed() -> None:
            if self.stdin is None:
                return
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                if input:
                    self.stdin.write(input)
                    await self.stdin.drain()
            self.stdin.close()

        async def drain(stream: asyncio.StreamReader | None) -> bytes:
            return b"" if stream is None else await stream.read()

        _, out, err = await asyncio.gather(feed(), drain(self.stdout), drain(self.stderr))
        await self.wait()
        return out, err

    def _reaped(self) -> None:
        """The child has exited (its pidfd is readable): reap it, once."""
        code = self._popen.poll()
        if code is not None and not self._exited.done():
            self._exited.set_result(code)


async def spawn(
    *argv: str,
    stdin: int | IO[Any] | None = None,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
    env: Mapping[str, str] | None = None,
    pass_fds: Collection[int] = (),
) -> Child:
    """Start `argv` without fork() (see the module docstring). Raises OSError when it
    cannot be started (no such program, no permission)."""
    loop = asyncio.get_running_loop()
    # Blocks only until the child has exec'd (as uvloop's spawn does): vfork, no copy.
    popen = subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=stderr,  # noqa: ASYNC220
                             env=env, pass_fds=tuple(pass_fds))
    child = Child(popen)
    try:
        _watch_exit(loop, child)
        if popen.stdin is not None:
            transport, protocol = await loop.connect_write_pipe(
                lambda: asyncio.streams.FlowControlMixin(loop=loop), popen.stdin)
            child.stdin = asyncio.StreamWriter(transport, protocol, None, loop)
        if popen.stdout is not None:
            child.stdout = await _reader(loop, popen.stdout)
        if popen.stderr is not None:
            child.stderr = await _reader(loop, popen.stderr)
    except BaseException:
        popen.kill()
        raise
    return child


async def _reader(loop: asyncio.AbstractEventLoop, pipe: IO[bytes]) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=_STREAM_LIMIT, loop=loop)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe)
    return reader


def _watch_exit(loop: asyncio.AbstractEventLoop, child: Child) -> None:
    """Call child._reaped() on the loop when the child exits: through a pidfd where the
    kernel has them (Linux 5.3), else from a thread blocked in waitpid (asyncio's own
    ThreadedChildWatcher does the same). Only this process's Popen reaps the child."""
    try:
        pidfd = os.pidfd_open(child.pid)
    except (AttributeError, OSError):  # not Linux, or an old kernel
        def wait() -> None:
            child._popen.wait()
            with contextlib.suppress(RuntimeError):  # the loop has closed meanwhile
                loop.call_soon_threadsafe(child._reaped)

        threading.Thread(target=wait, name=f"grebe-wait-{child.pid}", daemon=True).start()
        return

    def exited() -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        child._reaped()

    loop.add_reader(pidfd, exited)
