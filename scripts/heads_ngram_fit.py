"""Fit the char n-gram TF-IDF heads that `train_heads.py` fuses with the embedding heads.

One IDF vector, fitted on every training-split text; per binary head a logistic
regression (balanced classes, C chosen on validation average precision) on the same
rows the embedding head trains on. The fusion weight of each head is chosen later, on
the validation split, by `train_heads.py` reading the scores through the served code
(`grebe.inference.heads_ngram.CharNgrams`, float16 weights), so the thresholds it picks
are the thresholds of exactly what runs in production.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import heads_corpora as hc
import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_extraction.text import TfidfTransformer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score

from grebe.inference.heads_ngram import CharNgrams, save, vectorizer

C_GRID = (1.0, 4.0, 16.0)
#: weight of the n-gram head in the fused probability; 0 keeps the embedding head alone
FUSE_GRID = (0.0, 0.25, 0.5, 0.75)


def fit_ngram_heads(
    train_texts: list[str],
    heads: dict[str, tuple[list[hc.Row], list[hc.Row], bool]],
    out: Path,
) -> CharNgrams:
    """`heads`: head -> (train rows, val rows, balance sources: weigh each source of a
    class the same, as the embedding head does). Writes `out` and returns it loaded."""
    hashed = vectorizer()
    tfidf = TfidfTransformer(sublinear_tf=True).fit(hashed.transform(train_texts))
    coefs, biases = [], []
    for head, (train, val, balance) in heads.items():
        x = tfidf.transform(hashed.transform([r.text for r in train]))
        xv = tfidf.transform(hashed.transform([r.text for r in val]))
        y = np.array([r.labels[head] for r in train])
        yv = np.array([r.labels[head] for r in val])
        w = hc.balanced_weights(train, head) if balance else None
        wv = hc.balanced_weights(val, head) if balance else None
        best: tuple[float, float, LogisticRegression] | None = None
        for c in C_GRID:
            model = LogisticRegression(C=c, class_weight=None if balance else "balanced",
                                       solver="liblinear", max_iter=2000)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                model.fit(x, y, sample_weight=w)
            ap = float(average_precision_score(yv, model.predict_proba(xv)[:, 1],
                                               sample_weight=wv))
            print(f"  char n-gram {head} C={c}: val AP {ap:.4f}")
            if best is None or ap > best[0]:
                best = (ap, c, model)
        assert best is not None
        coefs.append(best[2].coef_[0])
        biases.append(best[2].intercept_[0])
    save(out, tfidf.idf_, np.stack(coefs, axis=1), np.array(biases), list(heads))
    return CharNgrams.load(out)


def choose_fusion(
    emb_val: np.ndarray, char_val: np.ndarray, y_val: np.ndarray,
    weights: np.ndarray | None = None,
) -> tuple[float, Callable[[np.ndarray, np.ndarray], np.ndarray]]:
    """The fusion weight with the best validation average precision (rows weighed by
    `weights` where the head balances its sources)."""
    scored = []
    for w in FUSE_GRID:
        ap = float(average_precision_score(y_val, (1 - w) * emb_val + w * char_val,
                                           sample_weight=weights))
        scored.append((ap, -w, w))
        print(f"    fuse weight {w:.2f}: val AP {ap:.4f}")
    weight = max(scored)[2]
    return weight, lambda emb, char: (1 - weight) * emb + weight * char
