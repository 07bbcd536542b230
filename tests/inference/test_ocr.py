"""tesseract OCR on the scanned text page bundled with scikit-image."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import skimage
from PIL import Image

from grebe.errors import InferenceError
from grebe.inference.base import OCR
from grebe.inference.ocr import TesseractOCR

PAGE = Path(skimage.__file__).parent / "data" / "page.png"
EXPECTED = {"markers", "coins", "object", "background", "pixels", "label"}


async def test_reads_the_page_from_a_path_and_from_an_array() -> None:
    ocr = TesseractOCR()
    await ocr.start()
    assert isinstance(ocr, OCR)
    from_path = await ocr.read_text(PAGE)
    from_array = await ocr.read_text(np.asarray(Image.open(PAGE)))
    for text in (from_path, from_array):
        words = set(text.lower().replace(".", " ").replace(",", " ").split())
        assert words >= EXPECTED, words


async def test_blank_image_gives_empty_text() -> None:
    ocr = TesseractOCR()
    await ocr.start()
    assert await ocr.read_text(np.full((64, 64, 3), 255, dtype=np.uint8)) == ""


async def test_errors_are_inference_errors(tmp_path: Path) -> None:
    ocr = TesseractOCR(timeout_s=0.001)
    with pytest.raises(InferenceError, match="before start"):
        await ocr.read_text(PAGE)
    await ocr.start()
    with pytest.raises(InferenceError, match="not found"):
        await ocr.read_text(tmp_path / "missing.png")
    with pytest.raises(InferenceError, match="timed out"):
        await ocr.read_text(PAGE)
    with pytest.raises(InferenceError, match="not found"):
        await TesseractOCR(binary="no-such-tesseract").start()


async def test_undecodable_image_is_a_tesseract_failure(tmp_path: Path) -> None:
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG garbage")
    ocr = TesseractOCR()
    await ocr.start()
    with pytest.raises(InferenceError, match="tesseract failed"):
        await ocr.read_text(broken)
