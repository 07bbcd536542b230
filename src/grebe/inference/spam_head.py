"""The spam head: logistic regression on MiniLM embeddings, trained on SpamAssassin.

Weights are a few KB of numpy (`data/spam_head.npz`: coef, intercept, threshold and a
JSON metadata string) written by `scripts/train_spam_head.py` and shipped in the
package. Scoring is a dot product, cheap enough to run on the event loop for the
handful of embeddings a task holds; the embedding is the expensive part and is shared
with the other plans of a payload.

The head was fitted on e-mail (subject + body); posts are shorter and differ in
style, so flows should treat its probability as one signal, not a verdict.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from grebe.errors import InferenceError

PACKAGED_WEIGHTS = "spam_head.npz"
SPAM = "spam"


def packaged_weights_path() -> Path:
    return Path(str(resources.files("grebe.inference").joinpath("data", PACKAGED_WEIGHTS)))


class SpamHead:
    def __init__(
        self,
        coef: np.ndarray,
        intercept: float,
        threshold: float = 0.5,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        coef = np.asarray(coef, dtype=np.float32).reshape(-1)
        if not np.isfinite(coef).all() or not np.isfinite(intercept):
            raise InferenceError("spam head weights are not finite")
        if not 0.0 < threshold < 1.0:
            raise InferenceError(f"spam head threshold must be in (0, 1), got {threshold}")
        self.coef = coef
        self.intercept = float(intercept)
        self.threshold = float(threshold)
        self.metadata = metadata or {}

    @property
    def dim(self) -> int:
        return int(self.coef.shape[0])

    @property
    def embedder(self) -> str:
        """The embedder whose vectors this head was trained on."""
        return str(self.metadata.get("embedder", "unknown"))

    @property
    def version(self) -> str:
        return str(self.metadata.get("version", "unknown"))

    @classmethod
    def load(cls, path: str | Path | None = None) -> SpamHead:
        path = Path(path) if path is not None else packaged_weights_path()
        try:
            with np.load(path, allow_pickle=False) as data:
                metadata = json.loads(str(data["metadata"])) if "metadata" in data else {}
                return cls(
                    data["coef"],
                    float(data["intercept"]),
                    float(data["threshold"]),
                    metadata,
                )
        except (OSError, KeyError, ValueError) as exc:
            raise InferenceError(f"cannot load spam head weights {path}: {exc}") from exc

    def save(self, path: str | Path) -> None:
        np.savez_compressed(
            path,
            coef=self.coef,
            intercept=np.float32(self.intercept),
            threshold=np.float32(self.threshold),
            metadata=np.str_(json.dumps(self.metadata, sort_keys=True)),
        )

    def score(self, embeddings: np.ndarray) -> np.ndarray:
        """P(spam) per row of an [n, dim] array (or one [dim] vector -> shape [1])."""
        matrix = np.atleast_2d(np.asarray(embeddings, dtype=np.float32))
        if matrix.ndim != 2 or matrix.shape[1] != self.dim:
            raise InferenceError(
                f"spam head expects {self.dim}-d embeddings from {self.embedder}, "
                f"got shape {np.shape(embeddings)}"
            )
        logits = matrix @ self.coef + self.intercept
        return (1.0 / (1.0 + np.exp(-np.clip(logits, -50.0, 50.0)))).astype(np.float32)

    def is_spam(self, embeddings: np.ndarray) -> np.ndarray:
        return self.score(embeddings) >= self.threshold


class SpamHeadService:
    """The head as a backend with the Service lifecycle: built from config without
    touching the disk, its weights read in `start()` like every other model's."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = path
        self.head: SpamHead | None = None

    @property
    def name(self) -> str:
        return "spam-head" if self.head is None else f"spam-head:{self.head.version}"

    async def start(self) -> None:
        if self.head is None:
            self.head = SpamHead.load(self.path)

    async def stop(self) -> None:
        return None

    def score(self, embeddings: np.ndarray) -> np.ndarray:
        if self.head is None:
            raise InferenceError("spam-head: called before start()")
        return self.head.score(embeddings)
