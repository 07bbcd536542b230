"""The fused MiniLM graph (one MultiHeadAttention and one BiasGelu per layer) gives the
vectors of the unfused recipe the heads were trained on, and a graph the rewrite does
not fit is quantized as it is."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from grebe.inference.minilm import MiniLMModel, packaged_model_files
from grebe.inference.minilm_fuse import fuse
from grebe.inference.minilm_quant import _derive, quantized_model_dir

TWEETS = Path(__file__).resolve().parents[2] / "bench" / "data" / "tweets.jsonl"


def test_served_graph_is_fused_and_keeps_the_unfused_vectors(tmp_path: Path) -> None:
    model, tokenizer = packaged_model_files()
    served = quantized_model_dir(model, tokenizer, tmp_path / "served")
    ops = [node.op_type for node in onnx.load(str(served / "model.onnx")).graph.node]
    assert ops.count("MultiHeadAttention") == 6 and ops.count("BiasGelu") == 6
    assert "Softmax" not in ops and "Erf" not in ops
    unfused = tmp_path / "unfused"
    unfused.mkdir()
    _derive(model, tokenizer, unfused, fused_graph=False)
    assert "MultiHeadAttention" not in {
        node.op_type for node in onnx.load(str(unfused / "model.onnx")).graph.node}
    texts = [json.loads(line)["text"] for line in TWEETS.read_text().splitlines()[:400]]
    before = MiniLMModel(unfused, intra_op_threads=1, quantize=False, run_batch_size=1)
    after = MiniLMModel(served, intra_op_threads=1, quantize=False, run_batch_size=1)
    cosine = (before.encode(texts) * after.encode(texts)).sum(axis=1)
    # the issue's bar for the heads' vectors: p50 >= 0.995, min >= 0.98
    assert np.median(cosine) >= 0.995 and cosine.min() >= 0.98


def test_a_graph_without_the_pattern_is_left_as_it_is(tmp_path: Path) -> None:
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "s"])
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.INT64, ["b", "s"])
    graph = helper.make_graph(
        [helper.make_node("Add", ["input_ids", "attention_mask"], ["last_hidden_state"])],
        "not-bert", [ids, mask], [out])
    source = tmp_path / "source.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), source)
    target = tmp_path / "target.onnx"
    assert fuse(source, target) is False
    assert [n.op_type for n in onnx.load(str(target)).graph.node] == ["Add"]
