"""The packaged text heads: weights match their manifest, the maths of one stacked
matmul, load-time checks, and quality floors on real held-out text (HateCheck cases,
never trained on) and on the hand-written sanity set, both through the real MiniLM."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from grebe.errors import InferenceError
from grebe.inference.heads import (
    MANIFEST,
    OUTPUT_SIGMOID,
    TextHeads,
    file_sha256,
    packaged_heads_dir,
)
from grebe.inference.minilm import DIM, MODEL_NAME, MiniLMModel

DATA = Path(__file__).parent / "data"
EXPECTED_HEADS = {
    "spam": ("ham", "spam"),
    "offensive": ("none", "offensive"),
    "target": ("untargeted", "individual", "group", "other"),
    "hate": ("none", "hate"),
    "threat": ("none", "threat"),
}
# The bar is 0.90; heads-2026.11.23-2 (fused with char n-grams) measured 0.929
# (14 misses in 196 checks; 0.893 before the fusion), heads-2026.11.23-3 on the integer
# encoder served one text a pass 0.908 (18 misses), heads-2026.11.23-4 (identity-hate
# corpora) 0.934 (13 misses: docs/quality.md). The floor is the bar, so a
# regression past it fails.
SANITY_FLOOR = 0.90
BINARY = [name for name, classes in EXPECTED_HEADS.items() if len(classes) == 2]


@pytest.fixture(scope="module")
def heads() -> TextHeads:
    return TextHeads.load()


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    return json.loads((packaged_heads_dir() / MANIFEST).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def model() -> MiniLMModel:
    return MiniLMModel(intra_op_threads=1)


def flagged(heads: TextHeads, probs: dict[str, np.ndarray], head: str) -> np.ndarray:
    info = heads.heads[head]
    positive = info.classes[1]
    return probs[head][:, 1] >= info.thresholds[positive]


def test_packaged_heads_have_the_agreed_names_classes_and_provenance(
    heads: TextHeads, manifest: dict[str, Any]
) -> None:
    assert {name: info.classes for name, info in heads.heads.items()} == EXPECTED_HEADS
    assert heads.embedder == MODEL_NAME and heads.dim == DIM
    assert heads.version.startswith("heads-")
    for name, info in heads.heads.items():
        spec = manifest["heads"][name]
        path = packaged_heads_dir() / spec["file"]
        assert file_sha256(path) == spec["sha256"]
        assert path.stat().st_size < 400_000  # small weights, not data
        assert info.languages == ("en",)
        assert set(info.sources) <= set(manifest["sources"])
        for source in info.sources:
            recorded = manifest["sources"][source]
            assert recorded["licence"] and recorded["sha256"], source
            assert all(len(digest) == 64 for digest in recorded["sha256"].values())
        assert set(spec["rows"]) == {"train", "val", "test"}
        assert spec["test_metrics"], name
    ngram = packaged_heads_dir() / manifest["ngram"]["file"]
    assert file_sha256(ngram) == manifest["ngram"]["sha256"]
    assert ngram.stat().st_size < 2_000_000  # float16, small enough for git
    for name in BINARY:
        info = heads.heads[name]
        assert set(info.thresholds) == {info.classes[1]}
        assert 0.0 < info.thresholds[info.classes[1]] < 1.0
        assert 0.0 < info.target_fpr <= 0.05


TEXTS = ["hello", "buy now", "you idiot", "", "ok", "fine day", "x"]


def test_predict_gives_probabilities_per_head(heads: TextHeads) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(7, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    probs = heads.predict(x, TEXTS)
    assert set(probs) == set(EXPECTED_HEADS)
    for name, p in probs.items():
        assert p.shape == (7, len(EXPECTED_HEADS[name])) and p.dtype == np.float32
        assert np.all((p >= 0) & (p <= 1))
        np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-5)
    assert {k: v.shape for k, v in heads.predict(x[:0], []).items()} == {
        k: (0, len(c)) for k, c in EXPECTED_HEADS.items()
    }


def test_stacked_matmul_equals_each_head_on_its_own(heads: TextHeads) -> None:
    """predict() runs all first layers as one matmul; slicing must not mix heads up."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, DIM)).astype(np.float32)
    probs = heads.predict(x, TEXTS[:5])
    assert heads.ngrams is not None
    char = heads.ngrams.probabilities(TEXTS[:5])
    for name in EXPECTED_HEADS:
        with np.load(packaged_heads_dir() / f"{name}.npz") as data:
            act = x @ data["W0"] + data["b0"]
            for i in range(1, int(data["layers"])):
                act = np.maximum(act, 0) @ data[f"W{i}"] + data[f"b{i}"]
            output = str(data["output"])
        if output == OUTPUT_SIGMOID:
            p1 = 1 / (1 + np.exp(np.clip(-act[:, 0], -50, 50)))
            w = heads.heads[name].fuse_weight
            p1 = (1 - w) * p1 + w * char[name] if w else p1
            want = np.stack([1 - p1, p1], axis=1)
        else:
            e = np.exp(act - act.max(axis=1, keepdims=True))
            want = e / e.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(probs[name], want, atol=1e-5)


@pytest.mark.parametrize(
    "bad", [np.zeros((3, 128), np.float32), np.zeros(DIM, np.float32), np.full((2, DIM), np.nan)]
)
def test_predict_rejects_wrong_shapes_and_non_finite(heads: TextHeads, bad: np.ndarray) -> None:
    with pytest.raises(InferenceError):
        heads.predict(bad, ["a"] * len(bad))


def test_fused_heads_need_the_texts(heads: TextHeads) -> None:
    """Thresholds of a fused head were chosen on the fused score: the embedding half
    alone is no valid score, so a caller that forgets the texts gets an error."""
    assert any(info.fuse_weight > 0 for info in heads.heads.values())
    x = np.zeros((2, DIM), np.float32)
    for texts in (None, ["only one"]):
        with pytest.raises(InferenceError, match="read the texts too"):
            heads.predict(x, texts)


def test_char_ngrams_read_the_words_the_embedding_averages_away(heads: TextHeads) -> None:
    assert heads.ngrams is not None
    p = heads.ngrams.probabilities(["holy shit this pizza is amazing", "this pizza is amazing",
                                    "50% off, buy now, free shipping http://x.example",
                                    "had a nice walk"])
    assert p["offensive"][0] > 0.5 > p["offensive"][1]
    assert p["spam"][2] > 0.5 > p["spam"][3]


def test_load_refuses_ngram_weights_that_do_not_match_the_manifest(tmp_path: Path) -> None:
    shutil.copytree(packaged_heads_dir(), tmp_path / "heads")
    with np.load(tmp_path / "heads" / "ngram.npz") as data:
        arrays = dict(data)
    arrays["bias"] = arrays["bias"] + 1.0
    np.savez_compressed(tmp_path / "heads" / "ngram.npz", **arrays)
    with pytest.raises(InferenceError, match="sha256"):
        TextHeads.load(tmp_path / "heads")


def test_load_refuses_weights_that_do_not_match_the_manifest(tmp_path: Path) -> None:
    shutil.copytree(packaged_heads_dir(), tmp_path / "heads")
    with np.load(tmp_path / "heads" / "hate.npz") as data:
        arrays = dict(data)
    arrays["b0"] = arrays["b0"] + 1.0
    np.savez_compressed(tmp_path / "heads" / "hate.npz", **arrays)
    with pytest.raises(InferenceError, match="sha256"):
        TextHeads.load(tmp_path / "heads")


def test_load_fails_clearly_without_a_manifest(tmp_path: Path) -> None:
    with pytest.raises(InferenceError, match="cannot load text heads"):
        TextHeads.load(tmp_path)


@pytest.mark.slow
def test_hand_written_sanity_set_agrees(heads: TextHeads, model: MiniLMModel) -> None:
    """>= 90% agreement on the hard edges: harmless 'hate'/'kill'/'shoot', profanity in
    joy, ordinary posts, real promotion, insults, identity hate, threats."""
    posts = json.loads((DATA / "heads_sanity_posts.json").read_text())["posts"]
    assert len(posts) >= 60
    texts = [p["text"] for p in posts]
    probs = heads.predict(model.encode(texts), texts)
    flags = {name: flagged(heads, probs, name) for name in BINARY}
    checks = [
        (flags[h][i] == bool(want), p["text"], h)
        for i, p in enumerate(posts)
        for h, want in p["expect"].items()
    ]
    misses = [(text, head) for ok, text, head in checks if not ok]
    agreement = 1 - len(misses) / len(checks)
    assert agreement >= SANITY_FLOOR, f"agreement {agreement:.3f}; misses: {misses}"


@pytest.mark.slow
def test_held_out_hatecheck_floors(heads: TextHeads, model: MiniLMModel) -> None:
    """Floors a few points under what the shipped heads measure on this sample
    (docs/quality.md): identity hate found, threats found, look-alikes left alone."""
    cases = json.loads((DATA / "hatecheck_sample.json").read_text())["cases"]
    texts = [c["text"] for c in cases]
    probs = heads.predict(model.encode(texts), texts)
    hate, threat = flagged(heads, probs, "hate"), flagged(heads, probs, "threat")
    by_func: dict[str, list[int]] = defaultdict(list)
    for i, case in enumerate(cases):
        by_func[case["functionality"]].append(i)

    def rate(flags: np.ndarray, funcs: list[str]) -> float:
        idx = [i for f in funcs for i in by_func[f]]
        return float(flags[idx].mean())

    threats = ["threat_dir_h", "threat_norm_h"]
    hateful = [f for f in by_func if f.endswith("_h") and f not in threats]
    assert rate(hate, hateful) >= HATECHECK_FLOORS["hateful_recall"]
    assert rate(threat, threats) >= HATECHECK_FLOORS["threat_recall"]
    lookalikes = ["target_obj_nh", "ident_neutral_nh", "ident_pos_nh", "negate_neg_nh"]
    assert rate(hate, lookalikes) <= HATECHECK_FLOORS["lookalike_hate_rate"]
    assert rate(hate, ["target_obj_nh"]) <= HATECHECK_FLOORS["i_hate_thing_rate"]
    assert (
        rate(threat, [f for f in by_func if not f.startswith("threat_")])
        <= HATECHECK_FLOORS["non_threat_threat_rate"]
    )


# Measured on the committed sample with heads-2026.11.23-4: hateful flagged by hate or
# threat 0.69, threats 0.90, look-alikes flagged hate 0.275, non-threats flagged threat
# 0.20, "I hate <object>" 0.00 (heads-2026.11.23-2: 0.54, 0.85, 0.10, 0.20, 0.00). The
# look-alike rate rose with the identity-hate corpora: positive and negated statements
# about a group (ident_pos_nh, negate_neg_nh 0.5 each) now read as hate to the head
# alone; the flows' counter-speech rule answers part of it (docs/quality.md).
# heads-2026.11.28-6 (threat retrained with ThreatGram): the threat head no longer reads
# hate that threatens no one as a threat ("I hate women" 0.78 under -5), so each head is
# held to its own label: hate on the hateful cases that are not threats 0.556 (-5: 0.556),
# threats 0.80 (-5: 0.90; on all 273 HateCheck threats 0.886 against 0.897), non-threats
# flagged threat 0.156 (-5: 0.215). Under -5 "hate or threat" counted those misreadings as
# recall (0.667 -> 0.633 now).
HATECHECK_FLOORS = {
    "hateful_recall": 0.52,
    "threat_recall": 0.80,
    "lookalike_hate_rate": 0.32,
    "non_threat_threat_rate": 0.20,
    "i_hate_thing_rate": 0.10,
}


def test_char_ngram_features_are_sklearns_tfidf(heads: TextHeads) -> None:
    """features() computes sublinear TF-IDF + L2 on the CSR arrays for speed; it must be
    exactly what training fitted with (sklearn's TfidfTransformer, same IDF)."""
    from sklearn.feature_extraction.text import TfidfTransformer

    assert heads.ngrams is not None
    texts = ["holy shit this pizza is amazing!!", "", "ok ok ok", "BUY now http://x.example"]
    from scipy import sparse

    from grebe.inference.heads_ngram import vectorizer

    counts = vectorizer(heads.ngrams._ngram_range, heads.ngrams._idf.shape[0]).transform(texts)
    reference = TfidfTransformer(sublinear_tf=True).fit(counts)
    reference.idf_ = heads.ngrams._idf.astype(np.float64)
    ours = sparse.csr_matrix(heads.ngrams.features(texts), shape=counts.shape)
    np.testing.assert_allclose(ours.toarray(), reference.transform(counts).toarray(), atol=1e-6)
