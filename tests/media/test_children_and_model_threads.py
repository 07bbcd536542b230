"""Issue 14: `grebe run` on the media flows stalled at volume.

The engine (uvloop) started decoding children and tesseract with fork(); fork() runs
OpenBLAS's atfork handler, which shuts its thread pool down under a BLAS call running in
another thread (Whisper's feature extractor): that call never returned, so every post with
speech timed out, or the process stopped whole. Here a thread does BLAS products while
the real media code starts its children under uvloop, in a fresh interpreter (a stall can
take the GIL with it); the products must go on. Before the fix the thread stopped at the
first child, every time."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import asyncio, sys, tempfile, threading, time
    from pathlib import Path

    import numpy as np
    import uvloop
    from PIL import Image

    from grebe.inference.ocr import TesseractOCR
    from grebe.media.config import VideoConfig
    from grebe.media.video_sandbox import decode_video

    video, page = Path(sys.argv[1]), sys.argv[2]
    products = 0
    stop = threading.Event()

    def blas() -> None:  # what a model thread does: multi-threaded OpenBLAS products
        global products
        matrix = np.random.default_rng(0).random((256, 256))
        while not stop.is_set():
            matrix @ matrix
            products += 1

    async def main() -> None:
        thread = threading.Thread(target=blas, daemon=True)
        thread.start()
        ocr = TesseractOCR()
        await ocr.start()
        with tempfile.TemporaryDirectory() as work:
            for i in range(3):
                item = Path(work) / str(i)
                item.mkdir()
                decoded = await decode_video(video, item, VideoConfig(frames=2,
                                                                      frame_max_side=64))
                assert len(decoded.frames) == 2
                assert "coins" in (await ocr.read_text(page)).lower()  # a path
            pixels = np.asarray(Image.open(page))
            assert "coins" in (await ocr.read_text(pixels)).lower()  # piped to stdin
        # The children are done: the model thread must still be working.
        seen, deadline = products, time.monotonic() + 60
        while products < seen + 50 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        stop.set()
        print("products after the children:", products - seen, flush=True)
        sys.exit(0 if products >= seen + 50 else 3)

    uvloop.run(main())
""")


def test_starting_children_does_not_stall_a_blas_thread(bunny: Path, tmp_path: Path) -> None:
    import skimage

    page = Path(skimage.__file__).parent / "data" / "page.png"
    script = tmp_path / "children_and_blas.py"
    script.write_text(SCRIPT)
    # Two BLAS threads whatever the machine: a pool is what fork() tore down.
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2"}
    try:
        done = subprocess.run([sys.executable, str(script), str(bunny), str(page)], env=env,
                              capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError("the process stopped whole while starting children next to "
                             "a BLAS thread") from exc
    assert done.returncode == 0, (
        f"the BLAS thread stalled once children were started (exit {done.returncode}):\n"
        f"{done.stdout}{done.stderr[-2000:]}")
