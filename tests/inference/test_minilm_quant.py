"""The integer MiniLM grebe runs by default: derived from the packaged weights, cached,
deterministic, close to the packaged model's vectors, and built safely by engines that
start together."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest

from grebe.errors import InferenceError
from grebe.inference.machine_cache import CACHE_ENV
from grebe.inference.minilm import (
    MODEL_NAME,
    PACKAGED_NAME,
    MiniLMEmbedder,
    MiniLMModel,
    packaged_model_files,
)
from grebe.inference.minilm_quant import QUANTIZED_NAME, quantized_model_dir

TWEETS = Path(__file__).resolve().parents[2] / "bench" / "data" / "tweets.jsonl"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_derived_model_runs_integer_matmuls_and_builds_the_same_bytes(tmp_path: Path) -> None:
    model, tokenizer = packaged_model_files()
    first = quantized_model_dir(model, tokenizer, tmp_path / "a")
    second = quantized_model_dir(model, tokenizer, tmp_path / "b")
    ops = {node.op_type for node in onnx.load(str(first / "model.onnx")).graph.node}
    packaged_ops = {node.op_type for node in onnx.load(str(model)).graph.node}
    assert "MatMulInteger" in ops and "MatMulInteger" not in packaged_ops
    assert _sha(first / "model.onnx") == _sha(second / "model.onnx")
    assert (first / "tokenizer.json").read_bytes() == tokenizer.read_bytes()
    # cached: a second call returns the same directory without rebuilding
    stamp = (first / "model.onnx").stat().st_mtime_ns
    assert quantized_model_dir(model, tokenizer, tmp_path / "a") == first
    assert (first / "model.onnx").stat().st_mtime_ns == stamp


def test_engines_starting_together_build_one_valid_model(tmp_path: Path) -> None:
    model, tokenizer = packaged_model_files()
    results: list[Path] = []
    errors: list[BaseException] = []

    def build() -> None:
        try:
            results.append(quantized_model_dir(model, tokenizer, tmp_path))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(set(results)) == 1
    (built,) = set(results)
    assert sorted(p.name for p in built.iterdir()) == ["model.onnx", "tokenizer.json"]
    onnx.checker.check_model(str(built / "model.onnx"))


def test_vectors_stay_close_to_the_packaged_model_on_real_tweets() -> None:
    texts = [json.loads(line)["text"] for line in TWEETS.read_text().splitlines()[:300]]
    packaged = MiniLMModel(intra_op_threads=1, quantize=False).encode(texts)
    integer = MiniLMModel(intra_op_threads=1, quantize=True).encode(texts)
    cosine = (packaged * integer).sum(axis=1)
    assert np.median(cosine) > 0.985 and cosine.min() > 0.95
    # and it still is a sentence encoder: a tweet is nearest to itself across the two
    nearest = (integer @ packaged.T).argmax(axis=1)
    assert (nearest == np.arange(len(texts))).mean() > 0.97


def test_names_say_which_model_made_a_vector() -> None:
    assert MODEL_NAME == QUANTIZED_NAME != PACKAGED_NAME  # served by default
    assert MiniLMEmbedder().name == QUANTIZED_NAME
    assert MiniLMEmbedder(quantize=True).name == QUANTIZED_NAME
    assert MiniLMEmbedder(quantize=False).name == PACKAGED_NAME


def test_unwritable_cache_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(CACHE_ENV, str(blocker))
    model, tokenizer = packaged_model_files()
    with pytest.raises(InferenceError, match=CACHE_ENV):
        quantized_model_dir(model, tokenizer)


def test_a_served_vector_does_not_depend_on_its_pass_mates() -> None:
    # one activation scale per pass: in a shared pass a text's vector moved by up to 2.6%
    # (cosine 0.974); served one text a pass, replays agree whatever else was in flight
    texts = [json.loads(line)["text"] for line in TWEETS.read_text().splitlines()[:40]]
    model = MiniLMModel(intra_op_threads=1)
    assert model.run_batch_size == 1
    together = model.encode(texts)
    alone = np.stack([model.encode([t])[0] for t in texts])
    assert np.array_equal(together, alone)
    shared = MiniLMModel(intra_op_threads=1, run_batch_size=8).encode(texts)
    assert (shared * alone).sum(axis=1).min() < 0.999  # what one text a pass avoids
