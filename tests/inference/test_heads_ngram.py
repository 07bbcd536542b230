"""Serving hashes char n-grams without sklearn; the counts must be sklearn's exactly,
since the heads were trained on sklearn's HashingVectorizer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from grebe.inference.heads_ngram import N_FEATURES, NGRAM_RANGE, hashed_counts, vectorizer

TWEETS = Path(__file__).resolve().parents[2] / "bench" / "data" / "tweets.jsonl"
EDGES = ["", "   ", "a", "ab", "Hello  World\t\ttabs\n\nnewlines", "ÉCOLE Straße ǅ İ",
         "emoji 🎉🎉 mixed😀text", "f*ck fuuuck f.u.c.k", "x" * 300, "\u00a0nbsp\u2003em \x1c"]


def test_hashed_counts_are_sklearns_on_real_tweets_and_edge_cases() -> None:
    texts = [json.loads(line)["text"] for line in TWEETS.read_text().splitlines()] + EDGES
    reference = vectorizer().transform(texts)
    reference.sum_duplicates()
    data, indices, indptr = hashed_counts(texts, NGRAM_RANGE, N_FEATURES)
    np.testing.assert_array_equal(indptr, reference.indptr)
    np.testing.assert_array_equal(indices, reference.indices)
    np.testing.assert_array_equal(data, reference.data)


def test_loading_the_heads_imports_neither_sklearn_nor_scipy() -> None:
    code = ("import sys; from grebe.inference.heads import TextHeads; TextHeads.load(); "
            "print(sorted(m for m in ('sklearn', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
