"""Small trained text heads that all read one MiniLM embedding: one encoder pass, many heads.

Each head is a logistic regression or a small MLP (ReLU hidden layers) stored as numpy
arrays, one `.npz` per head, plus a `manifest.json` that says what every head was
trained on (sources, licences, sha256 of the raw files, rows per split), the thresholds
chosen on the validation split at a stated false-positive rate, and its test figures.
`scripts/train_heads.py` rebuilds all of it from the raw corpora with one command.

Why heads rather than one model per label: the encoder pass (~10 ms per post on CPU)
is the cost; a head is a [384 x k] matmul. `predict` stacks every head's first layer
into one matrix so N posts cost one matmul for all heads together (bench/heads.py).

Binary heads may be fused with a char n-gram TF-IDF head (`grebe.inference.heads_ngram`,
`ngram.npz` beside the heads, `fuse_weight` per head in the manifest): the embedding
averages away the one swear word or sales phrase that the n-grams see. `predict` then
needs the texts as well as their embeddings.

The embedding must be the L2-normalised 384-d vector of `grebe.inference.minilm`
(`embedder` names it): heads trained on one encoder's space are meaningless on another,
so loading checks the manifest's embedder and dimension, and `predict` checks shapes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from grebe.errors import InferenceError
from grebe.inference.heads_ngram import CharNgrams

MANIFEST = "manifest.json"
OUTPUT_SOFTMAX = "softmax"
OUTPUT_SIGMOID = "sigmoid"  # one logit column -> [1 - p, p]
OUTPUTS = (OUTPUT_SOFTMAX, OUTPUT_SIGMOID)


def packaged_heads_dir() -> Path:
    return Path(str(resources.files("grebe.inference").joinpath("data", "heads")))


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class HeadInfo:
    classes: tuple[str, ...]  # e.g. ("ham", "spam"); column order of predict()
    languages: tuple[str, ...]  # ISO 639-1 codes the head was trained AND evaluated on
    # class -> threshold chosen on the validation split; for a binary head the positive
    # class only; empty for `target`, which is read by argmax when `offensive` fires
    thresholds: dict[str, float]
    target_fpr: float  # the FPR those thresholds were chosen at
    sources: tuple[str, ...]  # training data names (keys of the manifest's "sources")
    # weight of the char n-gram head in the fused probability (0: embedding only),
    # chosen on the validation split (grebe.inference.heads_ngram)
    fuse_weight: float = 0.0


@dataclass(frozen=True)
class _Net:
    """Layers after the shared first matmul: ReLU between layers, then the output."""

    hidden: tuple[tuple[np.ndarray, np.ndarray], ...]
    output: str
    width: int  # columns of the first layer inside the stacked matrix


def _load_net(path: Path, dim: int) -> tuple[np.ndarray, np.ndarray, _Net]:
    with np.load(path, allow_pickle=False) as data:
        output = str(data["output"])
        count = int(data["layers"])
        layers = [
            (data[f"W{i}"].astype(np.float32), data[f"b{i}"].astype(np.float32).reshape(-1))
            for i in range(count)
        ]
    if output not in OUTPUTS:
        raise InferenceError(f"head {path.name}: unknown output {output!r}")
    if count < 1 or layers[0][0].shape[0] != dim:
        raise InferenceError(f"head {path.name}: first layer does not take {dim}-d input")
    for (w, b), nxt in zip(layers, [*layers[1:], None], strict=True):
        if w.shape[1] != b.shape[0] or (nxt is not None and nxt[0].shape[0] != w.shape[1]):
            raise InferenceError(f"head {path.name}: layer shapes do not chain")
        if not (np.isfinite(w).all() and np.isfinite(b).all()):
            raise InferenceError(f"head {path.name}: weights are not finite")
    first_w, first_b = layers[0]
    return first_w, first_b, _Net(tuple(layers[1:]), output, first_w.shape[1])


class TextHeads:
    """Small trained heads (logistic regression / small MLP in numpy) that all read the
    same L2-normalised 384-d MiniLM int8 embedding of a text: one encoder pass, many heads."""

    def __init__(
        self,
        manifest: dict[str, Any],
        nets: dict[str, tuple[np.ndarray, np.ndarray, _Net]],
        ngrams: CharNgrams | None = None,
    ):
        self.manifest = manifest
        self.version: str = str(manifest["version"])
        self.embedder: str = str(manifest["embedder"])
        self.dim: int = int(manifest["dim"])
        self.heads: dict[str, HeadInfo] = {}
        for name, spec in manifest["heads"].items():
            self.heads[name] = HeadInfo(
                classes=tuple(spec["classes"]),
                languages=tuple(spec["languages"]),
                thresholds={k: float(v) for k, v in spec["thresholds"].items()},
                target_fpr=float(spec["target_fpr"]),
                sources=tuple(spec["sources"]),
                fuse_weight=float(spec.get("fuse_weight", 0.0)),
            )
        fused = {name for name, info in self.heads.items() if info.fuse_weight > 0.0}
        if fused - set(ngrams.heads if ngrams is not None else ()):
            raise InferenceError(f"heads {sorted(fused)} are fused with char n-grams, but the "
                                 f"n-gram weights hold {ngrams.heads if ngrams else 'nothing'}")
        self.ngrams = ngrams
        self._nets = {name: nets[name][2] for name in self.heads}
        self._first_w = np.concatenate([nets[n][0] for n in self.heads], axis=1)
        self._first_b = np.concatenate([nets[n][1] for n in self.heads])
        for name, info in self.heads.items():
            net = self._nets[name]
            out = (net.hidden[-1][0] if net.hidden else nets[name][0]).shape[1]
            expected = 1 if net.output == OUTPUT_SIGMOID else len(info.classes)
            if out != expected or (net.output == OUTPUT_SIGMOID and len(info.classes) != 2):
                raise InferenceError(f"head {name}: {out} outputs for classes {info.classes}")

    @classmethod
    def load(cls, path: str | Path | None = None) -> TextHeads:
        """Read `manifest.json` and every head's `.npz` from `path` (default: the packaged
        weights), checking each file's sha256 against the manifest: a half-copied or
        mismatched weights file fails here, not as silently wrong scores later."""
        root = Path(path) if path is not None else packaged_heads_dir()
        try:
            manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
            dim = int(manifest["dim"])
            nets = {}
            for name, spec in manifest["heads"].items():
                file = root / spec["file"]
                if file_sha256(file) != spec["sha256"]:
                    raise InferenceError(f"head {name}: {file} does not match its manifest sha256")
                nets[name] = _load_net(file, dim)
            ngrams = None
            if "ngram" in manifest:
                file = root / manifest["ngram"]["file"]
                if file_sha256(file) != manifest["ngram"]["sha256"]:
                    raise InferenceError(f"{file} does not match its manifest sha256")
                ngrams = CharNgrams.load(file)
            return cls(manifest, nets, ngrams)
        except (OSError, KeyError, ValueError, TypeError) as exc:
            raise InferenceError(f"cannot load text heads from {root}: {exc!r}") from exc

    def predict(
        self, embeddings: np.ndarray, texts: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """[N, 384] float32 (and the N texts behind them) -> {head name: [N, n_classes]
        probabilities}. A fused head averages its embedding head with its char n-gram
        head (`fuse_weight`); its thresholds were chosen on that average, so without the
        texts there is no valid score and this fails instead of guessing."""
        matrix = np.asarray(embeddings, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[1] != self.dim:
            raise InferenceError(
                f"text heads expect [N, {self.dim}] embeddings from {self.embedder}, "
                f"got shape {matrix.shape}"
            )
        if not np.isfinite(matrix).all():
            raise InferenceError("text heads got non-finite embeddings")
        first = matrix @ self._first_w + self._first_b
        out: dict[str, np.ndarray] = {}
        start = 0
        for name, net in self._nets.items():
            act = first[:, start : start + net.width]
            start += net.width
            for w, b in net.hidden:
                act = np.maximum(act, 0.0) @ w + b
            out[name] = _probabilities(act, net.output)
        if self.ngrams is not None:
            if texts is None or len(texts) != matrix.shape[0]:
                raise InferenceError(
                    f"heads {list(self.ngrams.heads)} read the texts too: pass the "
                    f"{matrix.shape[0]} texts behind the embeddings"
                )
            char = self.ngrams.probabilities(texts) if len(texts) else {}
            for name in self.ngrams.heads:
                weight = self.heads[name].fuse_weight if name in self.heads else 0.0
                if weight > 0.0 and len(texts):
                    p = (1.0 - weight) * out[name][:, 1] + weight * char[name]
                    out[name] = np.stack([1.0 - p, p], axis=1).astype(np.float32)
        return out


def _probabilities(logits: np.ndarray, output: str) -> np.ndarray:
    if output == OUTPUT_SIGMOID:
        p = 1.0 / (1.0 + np.exp(-np.clip(logits[:, 0], -50.0, 50.0)))
        return np.stack([1.0 - p, p], axis=1).astype(np.float32)
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
