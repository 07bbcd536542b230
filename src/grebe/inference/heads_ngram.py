"""Character n-gram TF-IDF features and the linear heads that read them, fused with the
embedding heads of `grebe.inference.heads`.

Why a second reader beside the MiniLM embedding: a sentence embedding places "holy shit
this pizza is amazing" next to other happy food posts, and "click here, 50% off" next to
other cheerful sentences; the swear word or the sales vocabulary is one token among
many and gets averaged away. Character n-grams see exactly those tokens (and their
misspellings: "f*ck", "fuuuck"), while the embedding sees the sense. On the validation
splits the average of the two beats either alone for spam and offensive language
(docs/quality.md, "Fused heads"), which is why `train_heads.py` picks each head's fusion
weight on validation average precision.

No vocabulary is stored: features are hashed (sklearn's `HashingVectorizer`, MurmurHash3,
stable across versions), so the file holds only the IDF vector and one coefficient
column per fused head, in float16 (~1 MB compressed for four heads). The featurizer's
settings live in the weights file itself, so training and serving cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import HashingVectorizer

from grebe.errors import InferenceError

ANALYZER = "char_wb"  # n-grams inside word boundaries, padded with spaces
NGRAM_RANGE = (2, 5)
N_FEATURES = 2**17


def vectorizer(ngram_range: tuple[int, int] = NGRAM_RANGE,
               n_features: int = N_FEATURES) -> HashingVectorizer:
    """Raw n-gram counts (no norm): sublinear TF, IDF and L2 are applied by `CharNgrams`
    so that training (sklearn's TfidfTransformer) and serving compute the same vector."""
    return HashingVectorizer(analyzer=ANALYZER, ngram_range=ngram_range, n_features=n_features,
                             alternate_sign=False, norm=None, lowercase=True)


class CharNgrams:
    """TF-IDF char n-gram features of texts and the fused heads' logits on them, as one
    sparse matmul for every head."""

    def __init__(self, idf: np.ndarray, coef: np.ndarray, bias: np.ndarray,
                 heads: tuple[str, ...], ngram_range: tuple[int, int]) -> None:
        if idf.ndim != 1 or coef.shape != (idf.shape[0], len(heads)) or bias.shape != (len(heads),):
            raise InferenceError(f"char n-gram weights do not fit: idf {idf.shape}, "
                                 f"coef {coef.shape}, bias {bias.shape}, heads {heads}")
        if not (np.isfinite(idf).all() and np.isfinite(coef).all() and np.isfinite(bias).all()):
            raise InferenceError("char n-gram weights are not finite")
        self.heads = heads
        self._idf = idf.astype(np.float32)
        self._coef = coef.astype(np.float32)
        self._bias = bias.astype(np.float32)
        self._vectorizer = vectorizer(ngram_range, idf.shape[0])

    @classmethod
    def load(cls, path: Path) -> CharNgrams:
        with np.load(path, allow_pickle=False) as data:
            return cls(data["idf"], data["coef"], data["bias"],
                       tuple(str(h) for h in data["heads"]),
                       (int(data["ngram_range"][0]), int(data["ngram_range"][1])))

    def features(self, texts: Sequence[str]) -> sparse.csr_matrix:
        """Sublinear TF x IDF, L2-normalised rows: sklearn's TfidfTransformer(sublinear_tf
        =True) on the hashed counts. Done on the CSR arrays in place: scipy's elementwise
        and diagonal products cost 4x the hashing for one short text (bench/heads.py)."""
        matrix = sparse.csr_matrix(self._vectorizer.transform(list(texts)), dtype=np.float32)
        data = (1.0 + np.log(matrix.data)) * self._idf[matrix.indices]
        lengths = np.diff(matrix.indptr)
        rows = np.repeat(np.arange(len(lengths)), lengths)
        norms = np.sqrt(np.bincount(rows, weights=data * data, minlength=len(lengths)))
        norms[norms == 0.0] = 1.0
        matrix.data = (data / np.repeat(norms, lengths).astype(np.float32)).astype(np.float32)
        return matrix

    def probabilities(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """{head: [N] P(positive class)} of each fused head's logistic regression."""
        logits = np.asarray(self.features(texts) @ self._coef) + self._bias
        p = 1.0 / (1.0 + np.exp(-np.clip(logits, -50.0, 50.0)))
        return {head: p[:, i].astype(np.float32) for i, head in enumerate(self.heads)}


def save(path: Path, idf: np.ndarray, coef: np.ndarray, bias: np.ndarray,
         heads: Sequence[str], ngram_range: tuple[int, int] = NGRAM_RANGE) -> None:
    """float16 weights: three significant digits are far below the heads' noise."""
    np.savez_compressed(path, idf=idf.astype(np.float16), coef=coef.astype(np.float16),
                        bias=bias.astype(np.float32), heads=np.array(list(heads)),
                        ngram_range=np.array(ngram_range, dtype=np.int64))
