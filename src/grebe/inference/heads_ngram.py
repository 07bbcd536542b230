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

Serving hashes the n-grams itself (`hashed_counts`: sklearn's char_wb analyzer and
FeatureHasher, line for line, with `mmh3`'s MurmurHash3, the same function) and scores
with numpy: importing sklearn and scipy cost ~3.5 s of CPU in every engine start, the
largest part of it (docs/benchmarks.md, Real flows). Training keeps sklearn
(`vectorizer()`); `tests/inference/test_heads_ngram.py` checks both give the same counts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import mmh3
import numpy as np

from grebe.errors import InferenceError

if TYPE_CHECKING:
    from sklearn.feature_extraction.text import HashingVectorizer

ANALYZER = "char_wb"  # n-grams inside word boundaries, padded with spaces
NGRAM_RANGE = (2, 5)
N_FEATURES = 2**17


_WHITE_SPACES = re.compile(r"\s\s+")  # sklearn's VectorizerMixin._white_spaces
_INT32_MIN = -(2**31)


def vectorizer(ngram_range: tuple[int, int] = NGRAM_RANGE,
               n_features: int = N_FEATURES) -> HashingVectorizer:
    """Raw n-gram counts (no norm): sublinear TF, IDF and L2 are applied by `CharNgrams`
    so that training (sklearn's TfidfTransformer) and serving compute the same vector.
    For training only (it imports sklearn); serving uses `hashed_counts`."""
    from sklearn.feature_extraction.text import HashingVectorizer

    return HashingVectorizer(analyzer=ANALYZER, ngram_range=ngram_range, n_features=n_features,
                             alternate_sign=False, norm=None, lowercase=True)


def char_wb_ngrams(text: str, ngram_range: tuple[int, int]) -> list[str]:
    """sklearn's `char_wb` analyzer with lowercase=True: n-grams inside words, each word
    padded with one space either side; a word shorter than n counted once."""
    min_n, max_n = ngram_range
    ngrams: list[str] = []
    for word in _WHITE_SPACES.sub(" ", text.lower()).split():
        w = f" {word} "
        for n in range(min_n, max_n + 1):
            offset = 0
            ngrams.append(w[offset : offset + n])
            while offset + n < len(w):
                offset += 1
                ngrams.append(w[offset : offset + n])
            if offset == 0:
                break
    return ngrams


def feature_indices(ngrams: list[str], n_features: int) -> np.ndarray:
    """sklearn FeatureHasher's columns of string features: MurmurHash3 x86 32-bit, seed
    0, of the UTF-8 bytes (mmh3 encodes str as UTF-8), abs(h) % n_features, with
    abs(-2**31) defined as sklearn defines it. `mmh3.hash`'s defaults are seed 0 and
    signed, so it is mapped as it is (a generator around it cost a third more)."""
    hashes = np.fromiter(map(mmh3.hash, ngrams), dtype=np.int64, count=len(ngrams))
    columns = np.abs(hashes) % n_features
    columns[hashes == _INT32_MIN] = (2147483647 - (n_features - 1)) % n_features
    return columns


def hashed_counts(texts: Sequence[str], ngram_range: tuple[int, int],
                  n_features: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR (data, indices, indptr) of the hashed n-gram counts, columns sorted within
    each row: what `vectorizer().transform(texts)` holds after sum_duplicates()."""
    rows = [np.unique(feature_indices(char_wb_ngrams(t, ngram_range), n_features),
                      return_counts=True) for t in texts]
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(columns) for columns, _ in rows])
    if not rows:
        return np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64), indptr
    return (np.concatenate([counts for _, counts in rows]).astype(np.float32),
            np.concatenate([columns for columns, _ in rows]).astype(np.int64), indptr)


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
        self._ngram_range = ngram_range

    @classmethod
    def load(cls, path: Path) -> CharNgrams:
        with np.load(path, allow_pickle=False) as data:
            return cls(data["idf"], data["coef"], data["bias"],
                       tuple(str(h) for h in data["heads"]),
                       (int(data["ngram_range"][0]), int(data["ngram_range"][1])))

    def features(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """CSR (data, indices, indptr): sublinear TF x IDF, L2-normalised rows, i.e.
        sklearn's TfidfTransformer(sublinear_tf=True) on the hashed counts, on the CSR
        arrays directly (scipy's elementwise and diagonal products cost 4x the hashing
        for one short text, bench/heads.py)."""
        counts, indices, indptr = hashed_counts(texts, self._ngram_range, self._idf.shape[0])
        data = (1.0 + np.log(counts)) * self._idf[indices]
        lengths = np.diff(indptr)
        rows = np.repeat(np.arange(len(lengths)), lengths)
        norms = np.sqrt(np.bincount(rows, weights=data * data, minlength=len(lengths)))
        norms[norms == 0.0] = 1.0
        data = (data / np.repeat(norms, lengths)).astype(np.float32)
        return data, indices, indptr

    def probabilities(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """{head: [N] P(positive class)} of each fused head's logistic regression."""
        data, indices, indptr = self.features(texts)
        lengths = np.diff(indptr)
        rows = np.repeat(np.arange(len(lengths)), lengths)
        weighted = self._coef[indices] * data[:, None]  # [nnz, heads]
        logits = np.stack([np.bincount(rows, weights=weighted[:, i], minlength=len(lengths))
                           for i in range(len(self.heads))], axis=1) + self._bias
        p = 1.0 / (1.0 + np.exp(-np.clip(logits, -50.0, 50.0)))
        return {head: p[:, i].astype(np.float32) for i, head in enumerate(self.heads)}


def save(path: Path, idf: np.ndarray, coef: np.ndarray, bias: np.ndarray,
         heads: Sequence[str], ngram_range: tuple[int, int] = NGRAM_RANGE) -> None:
    """float16 weights: three significant digits are far below the heads' noise."""
    np.savez_compressed(path, idf=idf.astype(np.float16), coef=coef.astype(np.float16),
                        bias=bias.astype(np.float32), heads=np.array(list(heads)),
                        ngram_range=np.array(ngram_range, dtype=np.int64))
