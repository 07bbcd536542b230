"""The faults scripts/chaos.py injects, each a small context manager or call.

Kept apart from the rounds and checks so each is easy to read and to reuse: a tmpfs
mount for a data dir that can be filled, a filler that takes every free byte and gives
it back, a TCP proxy that can be cut (for a store or broker behind it) without touching
the shared server, and process-group helpers that skip zombies.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

FILLER = "chaos-filler.bin"
CHUNK = 1 << 20


@contextlib.contextmanager
def mount_tmpfs(path: Path, size_mb: int) -> Iterator[Path]:
    """A `size_mb` tmpfs at `path` (root only), unmounted on exit."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                   check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


@contextlib.contextmanager
def fill_disk(directory: Path) -> Iterator[int]:
    """Write a filler file until the file system is full; remove it on exit.
    Yields the bytes taken."""
    filler = directory / FILLER
    written = 0
    with filler.open("wb", buffering=0) as handle:
        for size in (CHUNK, 4096):  # megabytes, then top off in pages
            block = b"\0" * size
            while True:
                try:
                    n = handle.write(block) or 0
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
                written += n
                if n < size:
                    break
    try:
        yield written
    finally:
        filler.unlink(missing_ok=True)


def group_alive(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(stat.parent.name))
    return alive


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


class TcpProxy:
    """Forwards 127.0.0.1:<port> to an upstream; `cut()` drops every connection and
    refuses new ones while it lasts, like a server or a network that went away."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._closed = False

    def __enter__(self) -> TcpProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed = True
        self._listener.close()
        self._drop_all()

    @contextlib.contextmanager
    def cut(self) -> Iterator[None]:
        self._cut = True
        self._drop_all()
        try:
            yield
        finally:
            self._cut = False

    def _drop_all(self) -> None:
        with self._lock:
            sockets, self._open = self._open, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._cut:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open |= {client, upstream}
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
