"""Text in images via the tesseract command line.

A subprocess (argument list, never a shell string) with a timeout: a pathological
image cannot hang a task or take the worker down, and tesseract's CPU work is outside
our GIL. Arrays are PNG-encoded (on a thread) and piped through stdin; paths are
passed as-is. A semaphore caps concurrent tesseract processes. Started through
grebe.core.spawn, not asyncio's subprocesses: uvloop's fork() would stall the threads that
run the models (see that module).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
from pathlib import Path

import numpy as np

from grebe.core.spawn import DEVNULL, PIPE, spawn
from grebe.errors import InferenceError
from grebe.inference.base import ImageInput
from grebe.inference.nsfw import to_pil

TESSERACT = "tesseract"


class TesseractOCR:
    def __init__(
        self,
        *,
        languages: str = "eng",
        page_segmentation_mode: int = 3,
        timeout_s: float = 20.0,
        max_concurrent: int | None = None,
        binary: str = TESSERACT,
    ) -> None:
        self.languages = languages
        self.page_segmentation_mode = page_segmentation_mode
        self.timeout_s = timeout_s
        self.max_concurrent = max_concurrent or os.cpu_count() or 1
        self.binary = binary
        self._path: str | None = None
        self._slots: asyncio.Semaphore | None = None

    @property
    def name(self) -> str:
        return f"tesseract-{self.languages}"

    async def start(self) -> None:
        self._path = shutil.which(self.binary)
        if self._path is None:
            raise InferenceError(
                f"{self.binary} not found: apt-get install tesseract-ocr tesseract-ocr-eng"
            )
        self._slots = asyncio.Semaphore(self.max_concurrent)

    async def stop(self) -> None:
        return None

    async def read_text(self, image: ImageInput) -> str:
        if self._path is None or self._slots is None:
            raise InferenceError(f"{self.name}: read_text() before start()")
        stdin: bytes | None = None
        if isinstance(image, np.ndarray):
            source = "stdin"
            stdin = await asyncio.to_thread(_png_bytes, image)
        elif isinstance(image, str | Path):
            source = str(image)
            if not await asyncio.to_thread(os.path.isfile, source):
                raise InferenceError(f"image not found: {source}")
        else:
            raise InferenceError(f"unsupported image input: {type(image).__name__}")
        argv = [
            self._path,
            source,
            "stdout",
            "-l",
            self.languages,
            "--psm",
            str(self.page_segmentation_mode),
        ]
        async with self._slots:
            return _clean(await self._run(argv, stdin))

    async def _run(self, argv: list[str], stdin: bytes | None) -> str:
        # One thread per process: several run at once and tesseract's own OpenMP
        # threads would oversubscribe the cores.
        env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
        process = await spawn(*argv, stdin=PIPE if stdin is not None else DEVNULL,
                              stdout=PIPE, stderr=PIPE, env=env)
        try:
            async with asyncio.timeout(self.timeout_s):
                out, err = await process.communicate(stdin)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise InferenceError(f"tesseract timed out after {self.timeout_s}s") from None
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            raise
        if process.returncode != 0:
            message = err.decode(errors="replace").strip()[-300:]
            raise InferenceError(f"tesseract failed ({process.returncode}): {message}")
        return out.decode(errors="replace")


def _png_bytes(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    to_pil(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _clean(text: str) -> str:
    """Collapse tesseract's layout whitespace: lines kept, blank runs and form feeds out."""
    lines = (" ".join(line.split()) for line in text.replace("\f", "\n").splitlines())
    return "\n".join(line for line in lines if line)
