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
    # Spinning intra-op threads cost ~60% more CPU per text on shared cores, and a
    # second thread on a tweet's small pass ~45% more (docs/benchmarks.md).
    from grebe.inference.factory import build_embedder
    from grebe.inference.minilm import ORT_ALLOW_SPINNING
    from grebe.inference.settings import InferenceConfig

    async def options(section: dict[str, object]) -> tuple[str, int]:
        embedder = build_embedder(InferenceConfig.model_validate(section))
        assert isinstance(embedder, MiniLMEmbedder)
        await embedder.start()
        try:
            assert embedder.model is not None
            chosen = embedder.model.session.get_session_options()
            return (str(chosen.get_session_config_entry(ORT_ALLOW_SPINNING)),
                    chosen.intra_op_num_threads)
        finally:
            await embedder.stop()

    assert await options({}) == ("0", 1)
    assert await options({"minilm": {"intra_op_spinning": True, "intra_op_threads": 2}}) == (
        "1", 2)


def test_parts_are_pooled_from_the_texts_own_pass(model: MiniLMModel) -> None:
    text = "The team won the final 🎉. Fans sang all night!\nMy cat ignored it."
    sentences = ["The team won the final 🎉.", "Fans sang all night!", "My cat ignored it."]
    spans = [(text.index(s), text.index(s) + len(s)) for s in sentences]
    (encoded,) = model.encode_parts([(text, spans)])
    np.testing.assert_allclose(encoded.vector, model.encode([text])[0], atol=1e-5)
    # Every token of the text is in a part or the frame (CLS, SEP): all parts = the text.
    np.testing.assert_allclose(encoded.pooled([0, 1, 2]), encoded.vector, atol=1e-5)
    assert encoded.part_tokens.tolist() == [
        len(model.tokenizer.encode(text[a:b]).ids) - 2 for a, b in spans]
    # A sentence read in context stays close to the sentence encoded alone.
    alone = model.encode([text[a:b] for a, b in spans])
    # (0.89, 0.78, 0.76 here: a sentence in context carries some of its neighbours)
    assert all(float(encoded.part_vectors()[i] @ alone[i]) > 0.7 for i in range(3))


def test_parts_cut_off_by_truncation_have_no_tokens(model: MiniLMModel) -> None:
    text = "word " * 400 + ". Last sentence here."
    end = len(text)
    (encoded,) = model.encode_parts([(text, [(0, 2000), (2002, end)])])
    assert encoded.part_tokens[0] > 0 and encoded.part_tokens[1] == 0
    assert not encoded.part_vectors()[1].any()


async def test_embed_parts_shares_batches_with_embed() -> None:
    embedder = MiniLMEmbedder(intra_op_threads=1, max_wait_ms=50)
    await embedder.start()
    try:
        text = "First sentence. Second one."
        plain, parts = await asyncio.gather(
            embedder.embed(["hello world"]), embedder.embed_parts(text, [(0, 15), (16, 27)]))
        assert embedder.batcher is not None and embedder.batcher.batches == 1
        assert plain.shape == (1, 384) and parts.part_sums.shape == (2, 384)
    finally:
        await embedder.stop()


async def test_an_encoder_without_token_vectors_embeds_each_part() -> None:
    from grebe.inference.base import encode_parts_separately
    from grebe.inference.fakes import HashEmbedder

    embedder = HashEmbedder()
    text = "one two. three"
    encoded = await encode_parts_separately(embedder, text, [(0, 8), (9, 14)])
    np.testing.assert_allclose(encoded.vector, (await embedder.embed([text]))[0])
    np.testing.assert_allclose(encoded.part_vectors(), await embedder.embed(["one two.", "three"]))
    assert embedder.calls == 3  # one call for the text and its parts, then the two checks
