"""What a viewer was served, and what their interest searches found, shared between
feed-serve's worker processes.

One process ranks on one core (a home request is CPU in one event loop), so
`feed.http_workers` > 1 runs several worker processes on one port, each with its own
copy of the feed's state (thunder replay, index, feature table: caches, the same in
every worker). The one thing that must agree between them is what each viewer was
served, which the next page leaves out: the kernel hands a viewer's connections to
any worker. So each worker records a served page in its own viewer directory and
sends it, as one length-prefixed msgpack frame on a Unix stream connection, to every
other worker, which records it with the sender's time. It arrives within a scheduling
slice, long before the viewer's next refresh; two requests of one viewer at the same
instant on two workers may overlap, as two concurrent requests in one process may.

The same connections carry each neighbourhood a worker's interest searches found
(grebe.feed.neighbourhood; `share_searches`): the searches are the largest part of a
viewer's first request (~5 ms), and without this every worker made them for every
viewer. The others keep it as if they had searched (`SimilarPostsSource.adopt`); two
first requests at the same instant on two workers both search, as before. The frames
are a tagged union (page or neighbourhood) between workers of one parent, so of one
version: nothing outlives the server, no older format is read.

Stream connections, not datagrams: a Unix datagram socket queues at most
`net.unix.max_dgram_qlen` (10 by default) unread datagrams, and a worker busy ranking
for tens of milliseconds let that many pile up at 100 pages/s (bench/feed_http.py
lost pages so). A connection buffers what the peer has not read yet, up to
MAX_BUFFERED bytes per peer.

A page or neighbourhood that cannot be delivered (a peer not started yet or gone, or
that much behind) is counted in `dropped` and logged; a malformed frame in `rejected`
(the connection is closed). Either way the feed answers: at worst a post is served
again, or a viewer searched for again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

import msgspec

from grebe.feed.neighbourhood import Neighbourhood, NeighbourhoodKey
from grebe.feed.sources import SimilarPostsSource
from grebe.feed.viewers import MemoryViewerDirectory, Viewer

log = logging.getLogger(__name__)

#: The largest frame accepted (a page of max_results 1,000 ids, or a neighbourhood of
#: thousands, fit many times over).
MAX_FRAME = 1 << 20
#: Bytes a peer may have unread before pages to it are dropped (~1,000 pages of 50).
MAX_BUFFERED = 1 << 20
_HEAD = 4  # frame length, big-endian


class ServedPage(msgspec.Struct, array_like=True, tag="page"):
    user_id: str
    post_ids: list[str]
    served_at: float


class FoundNeighbourhood(msgspec.Struct, array_like=True, tag="hood"):
    """A viewer's neighbourhood as a search found it: its cache key's interest
    queries, its posts (most similar first) and similarities, `more` and `filled`."""

    user_id: str
    queries: bytes
    post_ids: list[str]
    similarity: list[float]
    more: bool
    filled: int


Frame = ServedPage | FoundNeighbourhood


class ReplicatedViewers:
    """A MemoryViewerDirectory whose served posts are sent to the peer workers'
    sockets and whose own socket (`path`) takes theirs. `start` listens; `stop`
    closes every connection."""

    def __init__(self, directory: MemoryViewerDirectory, path: Path,
                 peers: Sequence[Path]) -> None:
        self.directory = directory
        self.path = path
        self.peers = [str(p) for p in peers if p != path]
        self.dropped = 0  # pages or neighbourhoods not delivered to a peer
        self.rejected = 0  # frames that were neither
        self.received = 0  # pages received
        self.neighbourhoods = 0  # neighbourhoods received
        self._similar: SimilarPostsSource | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._writers: dict[str, asyncio.StreamWriter] = {}
        self._connecting: dict[str, asyncio.Lock] = {p: asyncio.Lock() for p in self.peers}
        self._readers: dict[asyncio.StreamWriter, asyncio.Task[None] | None] = {}
        self._encode = msgspec.msgpack.Encoder().encode
        self._decode = msgspec.msgpack.Decoder(Frame).decode

    def share_searches(self, similar: SimilarPostsSource | None) -> None:
        """Send each neighbourhood this worker's out-of-network source finds to the
        other workers, and keep theirs in it."""
        self._similar = similar
        if similar is not None:
            similar.on_search = self._found

    async def start(self) -> None:
        """Listen on this worker's socket (before serving: peers send from then on)."""
        self.path.unlink(missing_ok=True)  # left by a worker that died
        self._server = await asyncio.start_unix_server(self._serve_peer, path=str(self.path))

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for task in self._sending:
            task.cancel()
        reading = [task for task in self._readers.values() if task is not None]
        reading += list(self._sending)
        for writer in [*self._writers.values(), *self._readers]:
            writer.close()
        self._writers.clear()
        await asyncio.gather(*reading, return_exceptions=True)  # they see the close
        self.path.unlink(missing_ok=True)

    async def get(self, user_id: str) -> Viewer:
        return await self.directory.get(user_id)

    async def record_served(self, user_id: str, post_ids: Sequence[str]) -> None:
        now = self.directory.clock()
        self.directory.served_at(user_id, post_ids, now)
        await self._send(user_id, ServedPage(user_id, list(post_ids), now))

    def _found(self, key: NeighbourhoodKey, hood: Neighbourhood) -> None:
        """Send a neighbourhood just found (from inside a request: in a task)."""
        if self._server is None or not self.peers:
            return
        user_id, queries = key
        found = FoundNeighbourhood(user_id, queries, hood.ids, hood.similarity.tolist(),
                                   hood.more, hood.filled)
        task = asyncio.get_running_loop().create_task(self._send(user_id, found))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, user_id: str, message: Frame) -> None:
        if self._server is None or not self.peers:
            return
        body = self._encode(message)
        if len(body) > MAX_FRAME:  # the peer would refuse it and close the connection
            for peer in self.peers:
                self._drop(user_id, peer, f"a frame of {len(body)} bytes")
            return
        frame = len(body).to_bytes(_HEAD, "big") + body
        for peer in self.peers:
            writer = await self._writer(peer)
            if writer is None:
                self._drop(user_id, peer, "not connected")
            elif writer.transport.get_write_buffer_size() > MAX_BUFFERED:
                self._drop(user_id, peer, f"{MAX_BUFFERED} bytes unread")
            else:
                writer.write(frame)

    def _drop(self, user_id: str, peer: str, why: str) -> None:
        self.dropped += 1
        log.warning("page or neighbourhood of %s not sent to worker %s: %s", user_id, peer,
                    why)

    async def _writer(self, peer: str) -> asyncio.StreamWriter | None:
        """The connection to a peer, made (again) when there is none or it broke."""
        writer = self._writers.get(peer)
        if writer is not None and not writer.is_closing():
            return writer
        async with self._connecting[peer]:
            writer = self._writers.get(peer)
            if writer is not None and not writer.is_closing():
                return writer
            try:
                _, writer = await asyncio.open_unix_connection(peer)
            except OSError as exc:  # not listening yet, or gone
                log.debug("worker %s not reachable: %s", peer, exc)
                return None
            self._writers[peer] = writer
            return writer

    async def _serve_peer(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        self._readers[writer] = asyncio.current_task()
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(_HEAD), "big")
                if size > MAX_FRAME:
                    raise ValueError(f"a frame of {size} bytes")
                message = self._decode(await reader.readexactly(size))
                if isinstance(message, ServedPage):
                    self.received += 1
                    self.directory.served_at(message.user_id, message.post_ids,
                                             message.served_at)
                else:
                    self.neighbourhoods += 1
                    if self._similar is not None:
                        self._similar.adopt((message.user_id, message.queries),
                                            message.post_ids, message.similarity,
                                            more=message.more, filled=message.filled)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the peer closed its end
        except (ValueError, msgspec.DecodeError) as exc:
            self.rejected += 1
            log.warning("not a page or neighbourhood on %s: %s; connection closed",
                        self.path, exc)
        finally:
            self._readers.pop(writer, None)
            writer.close()
