"""What one engine process learns that the others must know too.

Why: posts are routed to engines by author (grebe.core.engine), so state kept per author
stays whole in one engine; state that spans authors (spam's coordination index, the
media near-duplicate index) would see only each engine's share of the stream. Such state
publishes each observation it records on a named channel; the engine process sends them
to the dispatcher with its results, and the dispatcher relays them to every other engine,
where the channel's handler records them (without answering a query). Every engine then
holds every observation, one IPC hop late: posts of one campaign that reach two engines
within that hop do not see each other (docs/benchmarks.md, "Two engines by default").

With one engine, or plans run in the dispatcher, nothing is attached and `publish` is a
no-op, so an index that shares costs nothing where there is nobody to share with.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import msgspec

log = logging.getLogger(__name__)

Handler = Callable[[Any], None]
_encode = msgspec.msgpack.Encoder().encode


class Peers:
    """Channels between the engine processes of one dispatcher (see the module)."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._send: Callable[[str, bytes], None] | None = None

    def channel(self, name: str, handler: Handler, kind: Any) -> Callable[[Any], None]:
        """Register what to do with `name`'s observations from other engines, each a
        `kind` (any type msgspec reads: a tuple of fields, a struct); return the function
        that publishes this engine's own. Observations travel as msgpack, packed only
        when there is another engine to send them to."""
        if name in self._handlers:
            raise ValueError(f"peer channel {name!r} is registered twice")
        decode = msgspec.msgpack.Decoder(kind).decode
        self._handlers[name] = lambda data: handler(decode(data))

        def publish(observation: Any) -> None:
            if self._send is not None:
                self._send(name, _encode(observation))

        return publish

    def attach(self, send: Callable[[str, bytes], None]) -> None:
        """Called by the engine process: where published observations go."""
        self._send = send

    def deliver(self, name: str, data: bytes) -> None:
        """An observation another engine published: hand it to the channel's handler.
        One that cannot be read is logged and dropped, never fatal to the engine."""
        handler = self._handlers.get(name)
        if handler is None:
            return
        try:
            handler(data)
        except Exception:
            log.exception("peer channel %s: an observation could not be recorded", name)


@runtime_checkable
class SharesWithPeers(Protocol):
    """State that keeps itself whole across engines through `Peers`."""

    def share_with(self, peers: Peers) -> None: ...
