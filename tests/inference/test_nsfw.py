"""Open-NSFW on real photos bundled with scikit-image."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import skimage

from grebe.errors import InferenceError
from grebe.inference.base import ImageClassifier
from grebe.inference.nsfw import NSFW, OpenNSFWClassifier

DATA = Path(skimage.__file__).parent / "data"


async def test_safe_photos_score_low_from_paths_and_arrays(tmp_path: Path) -> None:
    from PIL import Image

    model = OpenNSFWClassifier(intra_op_threads=1)
    await model.start()
    try:
        assert isinstance(model, ImageClassifier)
        paths = [DATA / n for n in ("astronaut.png", "coffee.png", "chelsea.png")]
        by_path = await model.classify_images(paths)
        arrays = [np.asarray(Image.open(p).convert("RGB")) for p in paths]
        by_array = await model.classify_images(arrays)
        grey = await model.classify_images([np.asarray(Image.open(DATA / "camera.png"))])
        bad = tmp_path / "broken.png"
        bad.write_bytes(b"not an image")
        with pytest.raises(InferenceError, match="cannot read image"):
            await model.classify_images([bad])
        with pytest.raises(InferenceError, match="HxW"):
            await model.classify_images([np.zeros((4, 4, 7), dtype=np.uint8)])
        # a bad image batched with good ones fails only its own caller
        outcomes: list[object] = await asyncio.gather(
            model.classify_images([paths[0]]), model.classify_images([bad]), return_exceptions=True
        )
        assert isinstance(outcomes[1], InferenceError)
        assert outcomes[0] == [{NSFW: pytest.approx(by_path[0][NSFW], abs=1e-5)}]
        assert await model.classify_images([]) == []
    finally:
        await model.stop()
    for scores in [*by_path, *grey]:
        assert 0.0 <= scores[NSFW] < 0.2
    for a, b in zip(by_path, by_array, strict=True):
        assert a[NSFW] == pytest.approx(b[NSFW], abs=1e-4)


async def test_the_configured_classifier_runs_one_onnx_thread() -> None:
    """The default config builds open-nsfw with one ONNX Runtime intra-op thread: ORT's
    own default (a spinning thread per core) cost ~1.6x the CPU per frame, and the media
    stages already score several items at once."""
    from grebe.inference.factory import build_nsfw
    from grebe.inference.settings import InferenceConfig

    model = build_nsfw(InferenceConfig())
    assert isinstance(model, OpenNSFWClassifier)
    await model.start()
    try:
        session = model._classifier._session
        assert session.get_session_options().intra_op_num_threads == 1
    finally:
        await model.stop()
