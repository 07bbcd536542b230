"""What a viewer was served, shared between feed-serve's worker processes.

One process ranks on one core (a home request is CPU in one event loop), so
`feed.http_workers` > 1 runs several worker processes on one port, each with its own
copy of the feed's state (thunder replay, index, feature table: caches, the same in
every worker). The one thing that must agree between them is what each viewer was
served, which the next page leaves out: the kernel hands a viewer's connections to
any worker. So each worker records a served page in its own viewer directory and
sends it, as one datagram on a Unix socket, to every other worker, which records it
with the sender's time. It arrives within a scheduling slice, long before the
viewer's next refresh; two requests of one viewer at the same instant on two workers
may overlap, as two concurrent requests in one process may.

A datagram that cannot be delivered (a peer not started yet or gone, its buffer full)
is counted in `dropped` and logged; a malformed one is counted in `rejected`. Either
way the feed answers: at worst a post is served again.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Sequence
from pathlib import Path

import msgspec

from grebe.feed.viewers import MemoryViewerDirectory, Viewer

log = logging.getLogger(__name__)

#: The largest page datagram read (max_results 1,000 ids fit many times over).
MAX_DATAGRAM = 1 << 20


class ServedPage(msgspec.Struct, array_like=True):
    user_id: str
    post_ids: list[str]
    served_at: float


class ReplicatedViewers:
    """A MemoryViewerDirectory whose served posts are sent to the peer workers' sockets
    and whose own socket (`path`) takes theirs. `start` binds it; `stop` closes it."""

    def __init__(self, directory: MemoryViewerDirectory, path: Path,
                 peers: Sequence[Path]) -> None:
        self.directory = directory
        self.path = path
        self.peers = [str(p) for p in peers if p != path]
        self.dropped = 0  # pages not delivered to a peer
        self.rejected = 0  # datagrams that were not a page
        self.received = 0
        self._sock: socket.socket | None = None
        self._encode = msgspec.msgpack.Encoder().encode
        self._decode = msgspec.msgpack.Decoder(ServedPage).decode

    def start(self) -> None:
        """Bind this worker's socket (before serving: peers send to it from then on)."""
        if self.path.exists():
            self.path.unlink()  # left by a worker that died
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(self.path))
        sock.setblocking(False)
        self._sock = sock
        asyncio.get_running_loop().add_reader(sock.fileno(), self._receive)

    def stop(self) -> None:
        sock, self._sock = self._sock, None
        if sock is None:
            return
        asyncio.get_running_loop().remove_reader(sock.fileno())
        sock.close()
        self.path.unlink(missing_ok=True)

    async def get(self, user_id: str) -> Viewer:
        return await self.directory.get(user_id)

    async def record_served(self, user_id: str, post_ids: Sequence[str]) -> None:
        now = self.directory.clock()
        self.directory.served_at(user_id, post_ids, now)
        sock = self._sock
        if sock is None or not self.peers:
            return
        page = self._encode(ServedPage(user_id, list(post_ids), now))
        for peer in self.peers:
            try:
                sock.sendto(page, peer)
            except OSError as exc:  # not bound yet, gone, or its buffer full
                self.dropped += 1
                log.warning("served page of %s not sent to worker %s: %s", user_id, peer,
                            exc)

    def _receive(self) -> None:
        sock = self._sock
        while sock is not None:
            try:
                data = sock.recv(MAX_DATAGRAM)
            except BlockingIOError:
                return
            try:
                page = self._decode(data)
            except msgspec.DecodeError as exc:
                self.rejected += 1
                log.warning("not a served page (%d bytes) on %s: %s", len(data), self.path,
                            exc)
                continue
            self.received += 1
            self.directory.served_at(page.user_id, page.post_ids, page.served_at)
