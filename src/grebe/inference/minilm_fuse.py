"""Fewer, larger operations in the MiniLM float graph before it is quantized.

Why: at tweet length (~29 tokens) a pass is ~250 small operations, and the attention of
each layer is ~25 of them (reshapes, transposes, a mask built from `Where`/`IsNaN`, two
products, a softmax) that ONNX Runtime's transformer optimizer does not recognise in
this export. One `MultiHeadAttention` per layer and one `BiasGelu` per feed-forward do
the same arithmetic in float, so the integer products (quantized afterwards, as before)
see the same inputs: cosine to the unfused model's vectors p50 1.0, min 0.99 on 4,163
real tweets, ~5% less CPU a tweet (docs/benchmarks.md, "Both cores").

The rewrite is checked on the spot: the fused float graph must give the unfused one's
token vectors on a sample input, else the unfused graph is kept (a `model_dir` model of
another shape is quantized as it is).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

#: all-MiniLM-L6-v2: 12 heads of 32 dimensions.
NUM_HEADS = 12
HIDDEN = 384
_MASK = "grebe_attention_mask_i32"
_MAX_DIFF = 1e-3  # largest token-vector difference the check accepts (float rounding)


def fuse(source: Path, target: Path) -> bool:
    """Write the fused graph of `source` to `target`; False (and `source` copied) when
    the rewrite does not reproduce the source's outputs."""
    import onnx
    from onnxruntime.transformers.onnx_model_bert import BertOnnxModel

    model = BertOnnxModel(onnx.load(str(source)), NUM_HEADS, HIDDEN)
    model.fuse_gelu()
    model.fuse_bias_gelu(is_fastgelu=False)
    fused = model.model
    if _fuse_attention(fused) == 0 or not _same_outputs(source, fused):
        onnx.save(onnx.load(str(source)), str(target))
        return False
    onnx.save(fused, str(target))
    return True


def _fuse_attention(model: Any) -> int:
    """Replace each layer's attention, from its biased Q/K/V projections to the context
    its output projection reads, by one com.microsoft MultiHeadAttention. Returns the
    number of layers rewritten (0: the pattern was not found, the graph is untouched)."""
    from onnx import TensorProto, helper

    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}

    def biased(suffix: str) -> dict[str, str]:
        found: dict[str, str] = {}
        for node in graph.node:
            for name in node.input:
                if name.endswith(suffix):
                    found[name[: -len(suffix)]] = node.output[0]
        return found

    queries = biased(".attention.self.query.bias")
    keys = biased(".attention.self.key.bias")
    values = biased(".attention.self.value.bias")
    dense: dict[str, Any] = {}
    for node in graph.node:
        for name in node.input:
            if name.endswith(".attention.output.dense.bias"):
                dense[name[: -len(".attention.output.dense.bias")]] = node
    layers = sorted(queries)
    if not layers or any(p not in keys or p not in values or p not in dense for p in layers):
        return 0
    replacements = []
    for prefix in layers:
        projection = producer.get(dense[prefix].input[0])  # the output dense MatMul
        if projection is None or projection.op_type != "MatMul":
            return 0
        context = projection.input[0]
        reshape = producer.get(context)
        if reshape is None or reshape.op_type != "Reshape":
            return 0
        replacements.append((reshape, queries[prefix], keys[prefix], values[prefix], context))
    graph.node.append(helper.make_node(
        "Cast", ["attention_mask"], [_MASK], to=TensorProto.INT32, name="grebe_mask_cast"))
    for i, (reshape, query, key, value, context) in enumerate(replacements):
        graph.node.remove(reshape)
        graph.node.append(helper.make_node(
            "MultiHeadAttention", [query, key, value, "", _MASK], [context],
            domain="com.microsoft", num_heads=NUM_HEADS,
            scale=1.0 / math.sqrt(HIDDEN // NUM_HEADS), name=f"grebe_attention_{i}"))
    _prune_and_sort(graph)
    if not any(op.domain == "com.microsoft" for op in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return len(replacements)


def _prune_and_sort(graph: Any) -> None:
    """Drop nodes nothing reads any more, then order the rest topologically."""
    nodes = graph.node
    outputs = {o.name for o in graph.output}
    while True:
        read = {name for node in nodes for name in node.input} | outputs
        dead = [node for node in nodes if not any(out in read for out in node.output)]
        if not dead:
            break
        for node in dead:
            nodes.remove(node)
    ready = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    ordered, pending = [], list(nodes)
    while pending:
        waiting = []
        for node in pending:
            if all(name in ready for name in node.input):
                ordered.append(node)
                ready.update(node.output)
            else:
                waiting.append(node)
        if len(waiting) == len(pending):
            raise ValueError("fused MiniLM graph has a cycle or an unknown input")
        pending = waiting
    del nodes[:]
    nodes.extend(ordered)


def _same_outputs(source: Path, fused: Any) -> bool:
    """The fused float graph's token vectors equal the source's on a sample input."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 20000, size=(2, 17), dtype=np.int64)
    mask = np.ones_like(ids)
    mask[1, 11:] = 0  # a padded row: the mask must mean the same to both
    options = ort.SessionOptions()
    options.log_severity_level = 3
    outputs = []
    for model in (str(source), fused.SerializeToString()):
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in {i.name for i in session.get_inputs()}:
            feeds["token_type_ids"] = np.zeros_like(ids)
        outputs.append(session.run(None, feeds)[0])
    real = mask.astype(bool)
    return bool(np.abs(outputs[0][real] - outputs[1][real]).max() <= _MAX_DIFF)
