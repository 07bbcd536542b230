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
streams on the loop (socket pairs, see spawn()), and its exit is seen through a pidfd on
the loop (no SIGCHLD handler, no waiter thread), so the same code runs on uvloop and on
asyncio's own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
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
            if self.stdin is not None:  # nobody reads it any more
                self.stdin.close()
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
    cannot be started (no such program, no permission).

    A PIPE is a socket pair, not a pipe: the loop then owns our end outright (uvloop
    detaches a socket it is given, where a pipe's file object would close the descriptor
    a second time, possibly someone else's by then), and each stream closes itself on the
    loop's thread when it ends, never from garbage collection in another thread."""
    loop = asyncio.get_running_loop()
    ours: dict[str, socket.socket] = {}
    given: dict[str, Any] = {"stdin": stdin, "stdout": stdout, "stderr": stderr}
    for name, how in list(given.items()):
        if how == PIPE:
            ours[name], given[name] = socket.socketpair()
    try:
        # Blocks only until the child has exec'd (as uvloop's spawn does): vfork, no copy.
        popen = subprocess.Popen(argv, env=env, pass_fds=tuple(pass_fds),  # noqa: ASYNC220
                                 stdin=given["stdin"], stdout=given["stdout"],
                                 stderr=given["stderr"])
    except BaseException:
        for end in ours.values():
            end.close()
        raise
    finally:
        for name in ours:
            given[name].close()  # the child has its own copy
    child = Child(popen)
    _watch_exit(loop, child)
    try:
        if "stdin" in ours:
            child.stdin = await _writer(loop, ours.pop("stdin"))
        if "stdout" in ours:
            child.stdout = await _reader(loop, ours.pop("stdout"))
        if "stderr" in ours:
            child.stderr = await _reader(loop, ours.pop("stderr"))
    except BaseException:
        for end in ours.values():
            end.close()
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        raise
    return child


class _ClosingReaderProtocol(asyncio.StreamReaderProtocol):
    """Closes its transport at the end of the stream (a socket's would otherwise stay
    half-open until garbage collection)."""

    def eof_received(self) -> bool:
        super().eof_received()
        return False


async def _reader(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=_STREAM_LIMIT, loop=loop)
    await loop.create_unix_connection(lambda: _ClosingReaderProtocol(reader, loop=loop),
                                      sock=sock)
    return reader


async def _writer(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> asyncio.StreamWriter:
    protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), loop=loop)
    transport, _ = await loop.create_unix_connection(lambda: protocol, sock=sock)
    return asyncio.StreamWriter(transport, protocol, None, loop)


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
