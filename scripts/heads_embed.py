"""Embedding cache for head training: text -> MiniLM vector, kept in chunk files.

Embedding ~60k corpus texts takes ~25 min on 2 CPU cores, so vectors are saved in
chunks of `CHUNK` texts as they are made (`<cache>/<model>/chunk-NNNNN.npz`, texts and
vectors together): an interrupted run keeps what it did, and a changed corpus only pays
for its new texts. The vectors come from the same `MiniLMModel` grebe serves with, so
the heads see at training exactly what they see in production.

    .venv/bin/python scripts/heads_embed.py [--corpora ~/.cache/grebe/corpora]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from grebe.inference.minilm import MiniLMModel
from grebe.inference.minilm_quant import QUANTIZED_NAME as MODEL_NAME

CHUNK = 1024
TRAIN_PASS = 16  # texts per encoder pass when the training vectors were made
SERVING_PASS = 1  # the flows embed one text a pass
DEFAULT_CORPORA = Path.home() / ".cache" / "grebe" / "corpora"


class EmbeddingCache:
    def __init__(self, root: Path, model_name: str = MODEL_NAME,
                 run_batch_size: int = TRAIN_PASS,
                 encoder: Callable[[], Any] | None = None) -> None:
        # Vectors made one text a pass (as the flows serve) differ slightly from those
        # made in passes of 16 (the encoder's per-pass scale), so each pass size keeps
        # its own directory and a reader says which it wants.
        suffix = "" if run_batch_size == TRAIN_PASS else f"-pass{run_batch_size}"
        self.dir = root / "embeddings" / f"{model_name}{suffix}"
        self.run_batch_size = run_batch_size
        self.dir.mkdir(parents=True, exist_ok=True)
        self.vectors: dict[str, np.ndarray] = {}
        for path in sorted(self.dir.glob("chunk-*.npz")):
            with np.load(path, allow_pickle=False) as data:
                self.vectors.update(zip(data["texts"].tolist(), data["vectors"], strict=True))
        # another encoder (scripts/encoder_compare.py): anything with encode(texts)
        self._encoder = encoder or (lambda: MiniLMModel(run_batch_size=self.run_batch_size,
                                                        quantize=True))
        self._model: Any = None

    def ensure(self, texts: Iterable[str], *, log: bool = True) -> None:
        """Embed every text not cached yet, saving a chunk at a time."""
        missing = list(dict.fromkeys(t for t in texts if t not in self.vectors))
        if not missing:
            return
        if self._model is None:
            self._model = self._encoder()
        started = time.perf_counter()
        for start in range(0, len(missing), CHUNK):
            chunk = missing[start : start + CHUNK]
            vectors = self._model.encode(chunk)
            self._save(chunk, vectors)
            self.vectors.update(zip(chunk, vectors, strict=True))
            if log:
                done = start + len(chunk)
                rate = done / (time.perf_counter() - started)
                print(f"embedded {done}/{len(missing)} ({rate:.0f}/s)", file=sys.stderr)

    def _save(self, chunk: list[str], vectors: np.ndarray) -> None:
        """Write under a name no other run can pick (two runs may fill one cache: a
        count of existing chunks collided) and rename into place, so a reader never
        loads half a file."""
        digest = hashlib.sha256("\0".join(chunk).encode()).hexdigest()[:16]
        final = self.dir / f"chunk-{time.time_ns()}-{digest}.npz"
        partial = final.with_suffix(".partial")
        with partial.open("wb") as fh:
            np.savez(fh, texts=np.array(chunk), vectors=vectors)
        os.replace(partial, final)

    def matrix(self, texts: list[str]) -> np.ndarray:
        self.ensure(texts)
        return np.stack([self.vectors[t] for t in texts]).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA)
    parser.add_argument("--only", help="comma-separated corpora to embed (default: all)")
    args = parser.parse_args()
    import heads_corpora  # a sibling script module

    cache = EmbeddingCache(args.corpora)
    # Held-out and small corpora first, so a partial run is already useful.
    readers = {**heads_corpora.HELD_OUT, **heads_corpora.TRAINING}
    order = ("hatecheck", "youtube", "ethos", "olid", "insults", "davidson", "spamassassin")
    order += tuple(name for name in readers if name not in order)
    names = args.only.split(",") if args.only else order
    for name in names:
        texts = [row.text for row in readers[name](args.corpora)]
        print(f"{name}: {len(texts)} texts", file=sys.stderr)
        cache.ensure(texts)


if __name__ == "__main__":
    main()
