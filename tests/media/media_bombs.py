"""Decompression bombs, made small: files of a few kB to a few MB whose frames decode to
hundreds of megabytes or more. PNG rows of zeros are compressed as a stream, so making
one never holds the decoded frame in memory; video bombs put such PNGs in a MOV."""

from __future__ import annotations

import functools
import struct
import zlib
from fractions import Fraction
from pathlib import Path

import av

#: PNG colour types and channels: RGB and RGBA.
_COLOUR = {"rgb": (2, 3), "rgba": (6, 4)}
#: The PyAV pixel format a PNG of (colour, bit depth) decodes to.
_PIX_FMT = {("rgb", 8): "rgb24", ("rgba", 8): "rgba", ("rgb", 16): "rgb48be",
            ("rgba", 16): "rgba64be"}


def _chunk(kind: bytes, body: bytes) -> bytes:
    return (struct.pack(">I", len(body)) + kind + body
            + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))


@functools.lru_cache(maxsize=8)  # a 12000x12000 one takes seconds to compress
def png_bomb(width: int, height: int, colour: str = "rgba", depth: int = 8) -> bytes:
    """A valid, all-black PNG: `width * height * channels * depth/8` bytes decoded."""
    colour_type, channels = _COLOUR[colour]
    row = b"\x00" * (1 + width * channels * depth // 8)  # filter byte 0, then zeros
    packer = zlib.compressobj(9)
    idat = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, depth, colour_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat)
            + _chunk(b"IEND", b""))


def video_bomb(path: Path, side: int, *, colour: str = "rgb", depth: int = 8,
               frames: int = 4, fps: int = 2, declared: int | None = None) -> Path:
    """A MOV of `frames` PNG-coded `side` x `side` frames (stream copy: never decoded).
    `declared` puts another size in the container's metadata: a liar."""
    frame = png_bomb(side, side, colour, depth)
    rate = Fraction(1, fps)
    with av.open(str(path), "w", format="mov") as out:
        stream = out.add_stream("png", rate=fps)
        stream.width = stream.height = declared or side
        stream.pix_fmt = _PIX_FMT[(colour, depth)]
        stream.time_base = rate
        for n in range(frames):
            packet = av.Packet(frame)
            packet.stream, packet.time_base = stream, rate
            packet.pts = packet.dts = n
            packet.duration = 1
            out.mux(packet)
    return path
