"""The real MiniLM int8 model: shape, normalisation, semantics, batching invariance."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pytest

from grebe.errors import InferenceError
from grebe.inference.base import Embedder
from grebe.inference.minilm import MiniLMEmbedder, MiniLMModel, packaged_model_files


@pytest.fixture(scope="module")
def model() -> MiniLMModel:
    return MiniLMModel(intra_op_threads=1)


def test_dimension_and_normalisation(model: MiniLMModel) -> None:
    vectors = model.encode(["hello world", "", "a" * 5000])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_similar_sentences_are_closer_than_unrelated(model: MiniLMModel) -> None:
    cat, kitten, stocks = model.encode(
        [
            "A cat is sleeping on the sofa.",
            "A kitten naps on the couch.",
            "The central bank raised interest rates again.",
        ]
    )
    assert float(cat @ kitten) > 0.6
    assert float(cat @ kitten) > float(cat @ stocks) + 0.4


def test_pinned_similarity_guards_tokenizer_and_pooling(model: MiniLMModel) -> None:
    # 0.705 was measured with this int8 model and mean pooling; CLS pooling, a wrong
    # tokenizer or a missing attention mask moves it far outside the band.
    a, b = model.encode(["How do I bake bread?", "What is a good recipe for a loaf?"])
    assert abs(float(a @ b) - 0.705) < 0.02


def test_length_sorted_chunks_keep_input_order(model: MiniLMModel) -> None:
    texts = [("word " * n).strip() for n in (40, 1, 17, 3, 90, 2, 8)] + ["a cat"]
    together = model.encode(texts)
    alone = np.stack([model.encode([t])[0] for t in texts])
    cosines = (together * alone).sum(axis=1)
    assert cosines.min() > 0.999


def test_non_string_input_is_a_clear_error(model: MiniLMModel) -> None:
    with pytest.raises(InferenceError, match="strings"):
        model.encode(["ok", 3])  # type: ignore[list-item]


def test_model_dir_override_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(InferenceError, match="missing"):
        MiniLMModel(tmp_path)
    onnx, tokenizer = packaged_model_files()
    shutil.copy(onnx, tmp_path / "model.onnx")
    shutil.copy(tokenizer, tmp_path / "tokenizer.json")
    assert MiniLMModel(tmp_path, intra_op_threads=1).encode(["x"]).shape == (1, 384)


async def test_embedder_service_batches_concurrent_callers() -> None:
    embedder = MiniLMEmbedder(max_batch_size=16, max_wait_ms=5, intra_op_threads=1)
    assert isinstance(embedder, Embedder)
    await embedder.start()
    try:
        texts = [f"post number {i} about topic {i % 7}" for i in range(64)]
        singles = await asyncio.gather(*(embedder.embed([t]) for t in texts))
        batch = await embedder.embed(texts)
        assert embedder.batcher is not None and embedder.batcher.batches < 64
        for i, row in enumerate(singles):
            assert row.shape == (1, 384)
            assert float(row[0] @ batch[i]) > 0.999
        assert (await embedder.embed([])).shape == (0, 384)
        with pytest.raises(InferenceError):
            await embedder.embed("not a list")  # type: ignore[arg-type]
    finally:
        await embedder.stop()


async def test_onnx_threads_do_not_busy_wait_unless_configured() -> None:
    # Spinning intra-op threads cost ~60% more CPU per text on shared cores.
    from grebe.inference.factory import build_embedder
    from grebe.inference.minilm import ORT_ALLOW_SPINNING
    from grebe.inference.settings import InferenceConfig

    async def spinning(section: dict[str, object]) -> str:
        embedder = build_embedder(InferenceConfig.model_validate(section))
        assert isinstance(embedder, MiniLMEmbedder)
        await embedder.start()
        try:
            assert embedder.model is not None
            options = embedder.model.session.get_session_options()
            return str(options.get_session_config_entry(ORT_ALLOW_SPINNING))
        finally:
            await embedder.stop()

    assert await spinning({}) == "0"
    assert await spinning({"minilm": {"intra_op_spinning": True}}) == "1"
