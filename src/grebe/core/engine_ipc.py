"""The engine IPC protocol: length-prefixed msgpack frames over a Unix socket pair.

The dispatcher side (grebe.core.engine) and the engine process (grebe.core.engine_process)
speak only these frames: a Configure first, then Submit batches one way and Results
batches the other, Share frames both ways (an engine's observations for the others,
relayed by the dispatcher: grebe.core.peers), and a Stop at shutdown.
"""

from __future__ import annotations

import asyncio
import struct

import msgspec

from grebe.types import TaskPayload, TaskResult

_HEADER = struct.Struct("!I")


class Submit(msgspec.Struct, tag="submit", array_like=True):
    items: list[tuple[int, TaskPayload]]


class Results(msgspec.Struct, tag="results", array_like=True):
    items: list[tuple[int, TaskResult]]


class Ready(msgspec.Struct, tag="ready", array_like=True):
    pid: int


class StartFailed(msgspec.Struct, tag="start_failed", array_like=True):
    error: str


class Stop(msgspec.Struct, tag="stop", array_like=True):
    pass


class Share(msgspec.Struct, tag="share", array_like=True):
    """Observations for the other engines (grebe.core.peers): an engine sends its own to
    the dispatcher, which relays them to every other engine."""

    items: list[tuple[str, bytes]]  # (channel, observation)


class Configure(msgspec.Struct, tag="configure", array_like=True):
    """The first frame to an engine: how to build its plans (a BundleRecipe's fields)."""

    builder: str
    argument: str
    concurrency: int
    index: int
    sys_path: list[str]  # the dispatcher's, so plan factories import the same modules
    engines: int = 1  # how many engines run: with one, there is nobody to share with


Frame = Submit | Results | Share | Ready | StartFailed | Stop | Configure

encoder = msgspec.msgpack.Encoder()
decoder = msgspec.msgpack.Decoder(Frame)


def pack_frame(message: Frame) -> bytes:
    body = encoder.encode(message)
    return _HEADER.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> Frame:
    """The next frame; IncompleteReadError when the other side has gone."""
    (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    return decoder.decode(await reader.readexactly(size))
