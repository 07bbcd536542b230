"""Image decoding for untrusted files: bomb guard, EXIF orientation, RGB, model inputs.

The pixel count is checked from the header, before any pixel is decoded, so a 50 kB PNG
claiming 100k x 100k pixels costs nothing. Decoding is blocking (Pillow releases the GIL
in its codecs): call these from a thread, not the event loop.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageMode, ImageOps, UnidentifiedImageError

from grebe.errors import MediaError, MediaTooLargeError

_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, UnidentifiedImageError)
_PACKED_PIXEL_BYTES = 4  # Pillow's storage for every multi-band mode
_FLATTEN_FIRST = frozenset({"P", "PA", "1"})


@dataclass(frozen=True)
class DecodedImage:
    """RGB pixels (HxWx3 uint8, possibly scaled down) and the original dimensions."""

    rgb: np.ndarray
    width: int
    height: int
    format: str


def open_image(path: str | Path, max_pixels: int) -> Image.Image:
    """Open lazily and refuse, from the header alone, more than `max_pixels` pixels."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(path)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise MediaTooLargeError(f"image {path} is a decompression bomb: {exc}") from exc
    except _DECODE_ERRORS as exc:
        raise MediaError(f"cannot read image {path}: {exc}") from exc
    width, height = image.size
    if width <= 0 or height <= 0:
        image.close()
        raise MediaError(f"image {path} has invalid dimensions {width}x{height}")
    if width * height > max_pixels:
        image.close()
        raise MediaTooLargeError(
            f"image {path} is {width}x{height} = {width * height} pixels, over the cap of "
            f"{max_pixels} (decompression-bomb guard)"
        )
    return image


def to_rgb(image: Image.Image) -> Image.Image:
    """RGB with transparency flattened onto white (dropping alpha would expose whatever
    colour the transparent pixels happen to hold, often black)."""
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return image.convert("RGB")


def decoded_bytes(image: Image.Image) -> int:
    """Bytes Pillow holds for the decoded image: it stores every multi-band mode at 4
    bytes a pixel (RGB included) and single-band ones at their sample size. Palette and
    bilevel images are flattened at full size (an RGBA copy and its RGB background), so
    those count too."""
    mode = ImageMode.getmode(image.mode)
    per_pixel = _PACKED_PIXEL_BYTES if len(mode.bands) > 1 else np.dtype(mode.typestr).itemsize
    if image.mode in _FLATTEN_FIRST:
        per_pixel += 2 * _PACKED_PIXEL_BYTES
    return image.size[0] * image.size[1] * per_pixel


def decode_image(path: str | Path, *, max_pixels: int, max_side: int | None = None,
                 max_decoded_bytes: int | None = None) -> DecodedImage:
    """Decode the first frame, upright (EXIF), as RGB; scaled to fit `max_side` if given.

    `max_decoded_bytes` caps what decoding holds (checked from the header, after a JPEG's
    DCT-domain downscale): the pixel cap alone let a 6300x6300 RGBA PNG take 737 MB. The
    image is scaled down before it is flattened to RGB, so no full-size copy follows."""
    image = open_image(path, max_pixels)
    try:
        width, height = image.size
        fmt = image.format or "unknown"
        if max_side is not None and fmt == "JPEG":
            image.draft("RGB", (max_side, max_side))  # DCT-domain downscale: far less memory
        if max_decoded_bytes is not None and (size := decoded_bytes(image)) > max_decoded_bytes:
            raise MediaTooLargeError(
                f"image {path} ({width}x{height} {image.mode}) decodes to {size} bytes, over "
                f"the cap of {max_decoded_bytes} (image.max_decoded_bytes)")
        image.load()
        if image.mode in _FLATTEN_FIRST:  # palette/bilevel: resizing them is nearest-only
            image = to_rgb(image)
        if max_side is not None and max(image.size) > max_side:
            image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
        upright = ImageOps.exif_transpose(image) or image
        rgb = to_rgb(upright)
        return DecodedImage(rgb=np.asarray(rgb, dtype=np.uint8), width=width, height=height,
                            format=fmt)
    except _DECODE_ERRORS as exc:
        raise MediaError(f"cannot decode image {path}: {exc}") from exc
    finally:
        image.close()


def _resize_short_side(rgb: np.ndarray, size: int) -> Image.Image:
    image = Image.fromarray(rgb)
    w, h = image.size
    scale = size / min(w, h)
    new = (max(size, round(w * scale)), max(size, round(h * scale)))
    return image.resize(new, Image.Resampling.BICUBIC)


def center_crop(rgb: np.ndarray, size: int) -> np.ndarray:
    """The model input most classifiers expect: short side to `size`, centre square."""
    image = _resize_short_side(rgb, size)
    w, h = image.size
    left, top = (w - size) // 2, (h - size) // 2
    return np.asarray(image.crop((left, top, left + size, top + size)), dtype=np.uint8)


def tiles(rgb: np.ndarray, size: int, max_tiles: int) -> list[np.ndarray]:
    """Square tiles along the long side, evenly spaced and overlapping as needed, so a
    tall screenshot or wide banner is seen whole instead of only its middle."""
    image = _resize_short_side(rgb, size)
    w, h = image.size
    long_side = max(w, h)
    count = min(max_tiles, max(1, -(-long_side // size)))  # ceil
    if count == 1:
        return [center_crop(rgb, size)]
    step = (long_side - size) / (count - 1)
    out = []
    for i in range(count):
        offset = round(i * step)
        box = (offset, 0, offset + size, size) if w >= h else (0, offset, size, offset + size)
        out.append(np.asarray(image.crop(box), dtype=np.uint8))
    return out
