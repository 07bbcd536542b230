"""Train every text head on MiniLM embeddings and write weights + manifest, one command.

    .venv/bin/python scripts/train_heads.py [--corpora ~/.cache/grebe/corpora] [--dry-run]

Raw corpora are read from `--corpora` (where to get each: docs/quality.md); they are
never downloaded here. Steps: read every corpus (scripts/heads_corpora.py), split each
row by a salted hash of its near-duplicate key (70/15/15, so twins never straddle
splits), drop training rows whose key occurs in the held-out HateCheck suite, embed
with the served MiniLM (cached, scripts/heads_embed.py); per head fit logistic
regression and a one-hidden-layer MLP on `train`, keep the better on `val` (average
precision, or log loss for the multi-class target head), choose the threshold on `val`
at the head's stated false-positive rate, and report precision/recall/F1/FPR on `test`
only, per corpus, on benign ordinary posts, cross-corpus (fitted on one corpus, tested
on another) and on HateCheck per functionality. Writes
src/grebe/inference/data/heads/{<head>.npz, manifest.json} unless --dry-run.
Deterministic: same files, same weights.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import heads_corpora as hc
import numpy as np
from heads_embed import DEFAULT_CORPORA, EmbeddingCache
from heads_ngram_fit import choose_fusion, fit_ngram_heads
from heads_spec import CROSS_CORPUS, HEADS, NGRAM_IDF_EXCLUDES, HeadSpec
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score, f1_score
from sklearn.neural_network import MLPClassifier

from grebe.inference.heads import (
    MANIFEST,
    OUTPUT_SIGMOID,
    OUTPUT_SOFTMAX,
    TextHeads,
    file_sha256,
    packaged_heads_dir,
)
from grebe.inference.heads_ngram import ANALYZER, N_FEATURES, NGRAM_RANGE, CharNgrams
from grebe.inference.heads_ngram import save as save_ngrams
from grebe.inference.minilm import DIM
from grebe.inference.minilm_quant import QUANTIZED_NAME as MODEL_NAME

SEED = 0
C_GRID = (0.3, 1.0, 3.0, 10.0)
MLP_HIDDEN = 128
MLP_ALPHA = 1e-3
OPERATING_FPRS = (0.005, 0.01, 0.02, 0.05)  # printed so the stated FPR is a visible choice
LANGUAGES = ("en",)  # every corpus is English; the heads abstain elsewhere (docs/quality.md)
BENIGN = {"davidson": "neither", "olid": "NOT"}  # ordinary posts from real data
NGRAM_FILE = "ngram.npz"


@dataclass(frozen=True)
class Fused:
    """An embedding head averaged with its char n-gram head, as TextHeads.predict does."""

    model: Any
    ngrams: CharNgrams
    head: str
    weight: float

    def proba(self, x: np.ndarray, texts: list[str]) -> np.ndarray:
        char = self.ngrams.probabilities(texts)[self.head]
        return (1 - self.weight) * self.model.predict_proba(x)[:, 1] + self.weight * char


def labelled(rows: list[hc.Row], head: str, sources: tuple[str, ...], split: str) -> list[hc.Row]:
    return [r for r in rows if head in r.labels and r.corpus in sources and r.split == split]


def fit(
    x: np.ndarray, y: np.ndarray, xv: np.ndarray, yv: np.ndarray, n_classes: int, quick: bool,
    w: np.ndarray | None = None, wv: np.ndarray | None = None,
) -> tuple[Any, str]:
    """Best of a C grid of logistic regressions and one small MLP, judged on val
    (`quick`: one logistic regression at C=1, for the cross-corpus refits).
    `w`, `wv`: per-row weights of train and val that replace balanced classes."""
    class_weight = None if w is not None else "balanced"

    def score(model: Any) -> float:
        proba = model.predict_proba(xv)
        if n_classes == 2:
            return float(average_precision_score(yv, proba[:, 1], sample_weight=wv))
        # argmax decides the target class, so judge macro F1 of argmax: log loss
        # preferred an MLP that never predicts the rare untargeted/other classes.
        return float(f1_score(yv, proba.argmax(axis=1), average="macro"))

    candidates: list[tuple[float, str, Any]] = []
    if quick:
        lr = LogisticRegression(C=1.0, class_weight=class_weight, max_iter=3000)
        return lr.fit(x, y, sample_weight=w), "logreg C=1.0"
    for c in C_GRID:
        lr = LogisticRegression(C=c, class_weight=class_weight, max_iter=3000)
        lr.fit(x, y, sample_weight=w)
        candidates.append((score(lr), f"logreg C={c}", lr))
    mlp = MLPClassifier(
        hidden_layer_sizes=(MLP_HIDDEN,),
        alpha=MLP_ALPHA,
        early_stopping=True,
        random_state=SEED,
        max_iter=300,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp.fit(x, y, sample_weight=w)
    candidates.append((score(mlp), f"mlp {MLP_HIDDEN} alpha={MLP_ALPHA}", mlp))
    for value, name, _ in candidates:
        print(f"    val {'AP' if n_classes == 2 else 'macro-F1'} {value:.4f}  {name}")
    best = max(candidates, key=lambda c: c[0])
    return best[2], best[1]


def layers_of(model: Any, n_classes: int) -> tuple[list[np.ndarray], str]:
    """[W0, b0, W1, b1, ...] in heads.py's layout (inputs x outputs)."""
    if isinstance(model, LogisticRegression):
        weights = [model.coef_.T, model.intercept_]
        return weights, OUTPUT_SIGMOID if n_classes == 2 else OUTPUT_SOFTMAX
    out: list[np.ndarray] = []
    for w, b in zip(model.coefs_, model.intercepts_, strict=True):
        out += [w, b]
    return out, OUTPUT_SIGMOID if n_classes == 2 else OUTPUT_SOFTMAX


def threshold_negatives(rows: list[hc.Row], head: str, spec: HeadSpec) -> np.ndarray:
    """Which validation rows set the threshold: the negatives of `threshold_sources`."""
    sources = spec.threshold_sources or spec.sources
    return np.array([r.labels[head] == 0 and r.corpus in sources for r in rows])


def source_weights(rows: list[hc.Row], head: str, spec: HeadSpec) -> np.ndarray | None:
    """Per-row weights where the head balances or upweights sources, else None
    (balanced classes)."""
    if spec.balance_sources:
        return hc.balanced_weights(rows, head)
    return hc.upweighted(rows, head, dict(spec.upweight)) if spec.upweight else None


def threshold_at(neg_scores: np.ndarray, fpr: float) -> float:
    """Lowest threshold whose false-positive rate on `neg_scores` is <= fpr."""
    ordered = np.sort(neg_scores)[::-1]
    allowed = int(np.floor(fpr * len(ordered)))
    return float(min(0.999, np.nextafter(ordered[allowed], 1.0))) if allowed < len(ordered) else 0.5


def binary_metrics(y: np.ndarray, flagged: np.ndarray) -> dict[str, Any]:
    tp = int(((y == 1) & flagged).sum())
    fp = int(((y == 0) & flagged).sum())
    fn = int(((y == 1) & ~flagged).sum())
    tn = int(((y == 0) & ~flagged).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    fpr = fp / (fp + tn) if fp + tn else 0.0
    return {
        "n": len(y),
        "precision": round(precision, 3),
        "recall": round(recall, 3),
        "f1": round(f1, 3),
        "fpr": round(fpr, 4),
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": tn,
    }


def fmt(m: dict[str, Any]) -> str:
    return (
        f"n={m['n']:5d} P={m['precision']:.3f} R={m['recall']:.3f} F1={m['f1']:.3f} "
        f"FPR={m['fpr']:.4f} (tp {m['tp']} fp {m['fp']} fn {m['fn']} tn {m['tn']})"
    )


class Trainer:
    def __init__(self, rows: list[hc.Row], cache: EmbeddingCache) -> None:
        self.rows = rows
        self.cache = cache

    def xy(self, rows: list[hc.Row], head: str) -> tuple[np.ndarray, np.ndarray]:
        return self.cache.matrix([r.text for r in rows]), np.array([r.labels[head] for r in rows])

    def train_head(
        self, head: str, spec: HeadSpec, sources: tuple[str, ...] | None = None
    ) -> tuple[Any, str, float]:
        quick = sources is not None
        sources = sources or spec.sources
        train = labelled(self.rows, head, sources, "train")
        val = labelled(self.rows, head, sources, "val")
        x, y = self.xy(train, head)
        xv, yv = self.xy(val, head)
        print(
            f"  {head} on {'+'.join(sources)}: train {dict(sorted(Counter(y.tolist()).items()))} "
            f"val {dict(sorted(Counter(yv.tolist()).items()))}"
        )
        model, kind = fit(x, y, xv, yv, len(spec.classes), quick,
                          source_weights(train, head, spec), source_weights(val, head, spec))
        threshold = 0.0
        if len(spec.classes) == 2:
            val_scores = model.predict_proba(xv)[:, 1]
            negatives = val_scores[threshold_negatives(val, head, spec)]
            threshold = threshold_at(negatives, spec.target_fpr)
            points = [
                (f, float((val_scores[yv == 1] >= threshold_at(negatives, f)).mean()))
                for f in OPERATING_FPRS
            ]
            print("    val recall at FPR " + ", ".join(f"{f:.3f}: {r:.3f}" for f, r in points))
        return model, kind, threshold

    def scores(self, model: Any, rows: list[hc.Row]) -> np.ndarray:
        texts = [r.text for r in rows]
        x = self.cache.matrix(texts)
        return model.proba(x, texts) if isinstance(model, Fused) else model.predict_proba(x)[:, 1]

    def flags(self, model: Any, rows: list[hc.Row], threshold: float) -> np.ndarray:
        if not rows:
            return np.zeros(0, dtype=bool)
        return self.scores(model, rows) >= threshold

    def fuse(
        self, head: str, spec: HeadSpec, model: Any, ngrams: CharNgrams
    ) -> tuple[Any, float, float, dict[str, float]]:
        """(model, fusion weight, threshold, thresholds at OPERATING_FPRS): the weight
        best on val AP; the thresholds re-chosen on the fused val scores (the policy
        picks its operating point from these, docs/quality.md)."""
        val = labelled(self.rows, head, spec.sources, "val")
        texts = [r.text for r in val]
        yv = np.array([r.labels[head] for r in val])
        emb = model.predict_proba(self.cache.matrix(texts))[:, 1]
        chars = ngrams.probabilities(texts)[head]
        weight, combine = choose_fusion(emb, chars, yv, source_weights(val, head, spec))
        negatives = combine(emb, chars)[threshold_negatives(val, head, spec)]
        at_fpr = {str(f): round(threshold_at(negatives, f), 4) for f in OPERATING_FPRS}
        return (Fused(model, ngrams, head, weight) if weight > 0 else model, weight,
                threshold_at(negatives, spec.target_fpr), at_fpr)

    def report_binary(
        self, head: str, model: Any, threshold: float, spec: HeadSpec
    ) -> dict[str, Any]:
        figures: dict[str, Any] = {}
        test_all = [
            r
            for r in self.rows
            if head in r.labels and r.split == "test" and r.corpus != "hatecheck"
        ]
        for corpus in sorted({r.corpus for r in test_all}):
            rows = [r for r in test_all if r.corpus == corpus]
            m = binary_metrics(
                np.array([r.labels[head] for r in rows]), self.flags(model, rows, threshold)
            )
            figures[f"test:{corpus}"] = m
            print(f"    test {corpus:12s} {fmt(m)}")
        rows = [r for r in test_all if r.corpus in spec.sources]
        figures["test:all-sources"] = m = binary_metrics(
            np.array([r.labels[head] for r in rows]), self.flags(model, rows, threshold)
        )
        print(f"    test {'all sources':12s} {fmt(m)}")
        for corpus, subset in BENIGN.items():
            rows = [
                r
                for r in self.rows
                if r.corpus == corpus and r.subset == subset and r.split == "test"
            ]
            rate = float(self.flags(model, rows, threshold).mean())
            figures[f"benign_fpr:{corpus}-{subset}"] = {"n": len(rows), "fpr": round(rate, 4)}
            print(f"    benign {corpus}-{subset} test: {rate:.4f} flagged of {len(rows)}")
        hatecheck = [r for r in self.rows if r.corpus == "hatecheck" and head in r.labels]
        if hatecheck:
            m = binary_metrics(
                np.array([r.labels[head] for r in hatecheck]),
                self.flags(model, hatecheck, threshold),
            )
            figures["hatecheck:all"] = m
            print(f"    HateCheck (held out) {fmt(m)}")
            by_func: dict[str, list[hc.Row]] = defaultdict(list)
            for r in hatecheck:
                by_func[r.subset].append(r)
            figures["hatecheck:flag_rate"] = {
                f: round(float(self.flags(model, rs, threshold).mean()), 3)
                for f, rs in sorted(by_func.items())
            }
            print(
                "    HateCheck flag rate: "
                + ", ".join(f"{f} {v:.2f}" for f, v in figures["hatecheck:flag_rate"].items())
            )
        return figures

    def report_target(self, model: Any, spec: HeadSpec) -> dict[str, Any]:
        figures: dict[str, Any] = {}
        for corpus in spec.sources:
            rows = [
                r
                for r in self.rows
                if "target" in r.labels and r.corpus == corpus and r.split == "test"
            ]
            x, y = self.xy(rows, "target")
            pred = model.predict_proba(x).argmax(axis=1)
            per_class = {}
            for i, cls in enumerate(spec.classes):
                if (y == i).any() or (pred == i).any():
                    per_class[cls] = binary_metrics((y == i).astype(int), pred == i)
                    print(f"    test {corpus:8s} {cls:10s} {fmt(per_class[cls])}")
            figures[f"test:{corpus}"] = {
                "accuracy": round(float((pred == y).mean()), 3),
                "per_class": per_class,
            }
        return figures


def cross_corpus(trainer: Trainer) -> dict[str, Any]:
    """Fit on one corpus, test on another: a gain that shows on one corpus only is no gain."""
    out: dict[str, Any] = {}
    for head, sources, test_corpus in CROSS_CORPUS:
        spec = HEADS[head]
        model, _, threshold = trainer.train_head(head, spec, sources)
        rows = [
            r
            for r in trainer.rows
            if r.corpus == test_corpus and head in r.labels and r.split == "test"
        ]
        m = binary_metrics(
            np.array([r.labels[head] for r in rows]), trainer.flags(model, rows, threshold)
        )
        out[f"{head}:{'+'.join(sources)}->{test_corpus}"] = m
        print(f"  CROSS {head} {'+'.join(sources)} -> {test_corpus}: {fmt(m)}")
    return out


def load_rows(root: Path) -> list[hc.Row]:
    held_out = [r for fn in hc.HELD_OUT.values() for r in fn(root)]
    held_keys = {r.key for r in held_out}
    rows = [r for fn in hc.TRAINING.values() for r in fn(root)]
    leaked = [r for r in rows if r.key in held_keys]
    print(f"dropped {len(leaked)} training-corpus rows whose text is in the held-out suite")
    return [r for r in rows if r.key not in held_keys] + held_out


def updated_manifest(out: Path, new: dict[str, Any], new_ngrams: Path) -> dict[str, Any]:
    """The heads in `out` with `new`'s heads put in: their n-gram columns replace the
    old ones in `out`'s n-gram file (same IDF, or it is an error: the other heads' n-gram
    halves were fitted with that IDF), the other heads untouched."""
    old = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    with np.load(out / NGRAM_FILE, allow_pickle=False) as kept, \
            np.load(new_ngrams, allow_pickle=False) as fresh:
        if not np.array_equal(kept["idf"], fresh["idf"]):
            raise SystemExit(f"{out / NGRAM_FILE}: its IDF is not this run's; retrain all heads")
        columns = [str(h) for h in kept["heads"]]
        coef, bias = kept["coef"].copy(), kept["bias"].copy()
        for i, head in enumerate(str(h) for h in fresh["heads"]):
            j = columns.index(head)
            coef[:, j], bias[j] = fresh["coef"][:, i], fresh["bias"][i]
        save_ngrams(out / NGRAM_FILE, kept["idf"], coef, bias, columns,
                    tuple(int(n) for n in kept["ngram_range"]))
    old["version"] = new["version"]
    old["sources"].update({s: new["sources"][s] for h in new["heads"]
                           for s in new["heads"][h]["sources"]})
    old["heads"].update(new["heads"])
    old["ngram"]["sha256"] = file_sha256(out / NGRAM_FILE)
    old["updated_heads"] = sorted(new["heads"])
    return old


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA)
    parser.add_argument("--out", type=Path, default=packaged_heads_dir())
    parser.add_argument(
        "--version",
        default=f"heads-{datetime.date.today():%Y.%m.%d}-1",
        help="model_version stamped into annotations",
    )
    parser.add_argument("--dry-run", action="store_true", help="print figures, write nothing")
    parser.add_argument("--heads", help="comma-separated subset (implies --dry-run, unless"
                        " --update)")
    parser.add_argument("--update", action="store_true",
                        help="with --heads: write those heads into --out beside the heads"
                        " already there, whose weights, n-gram columns and thresholds stay")
    parser.add_argument("--skip-cross", action="store_true", help="skip cross-corpus refits")
    args = parser.parse_args()
    heads = {h: HEADS[h] for h in (args.heads.split(",") if args.heads else HEADS)}
    every_row = load_rows(args.corpora)
    # the IDF reads every head's corpora, so a run of some heads fits the same IDF
    idf_texts = [r.text for r in every_row if r.split == "train"
                 and r.corpus in {c for spec in HEADS.values() for c in spec.sources}
                 and r.corpus not in NGRAM_IDF_EXCLUDES]
    used = {c for spec in heads.values() for c in spec.sources} | set(hc.HELD_OUT)
    rows = [r for r in every_row if r.corpus in used]
    trainer = Trainer(rows, EmbeddingCache(args.corpora))
    trainer.cache.ensure([r.text for r in rows])
    manifest: dict[str, Any] = {
        "version": args.version,
        "embedder": MODEL_NAME,
        "dim": DIM,
        "split": {
            "salt": hc.SPLIT_SALT,
            "val_percent": hc.VAL_PERCENT,
            "test_percent": hc.TEST_PERCENT,
        },
        "sources": {
            name: {
                **meta,
                "sha256": hc.source_digests(args.corpora, name),
                "rows": dict(Counter(r.split for r in rows if r.corpus == name)),
            }
            for name, meta in hc.SOURCES.items()
        },
        "heads": {},
    }
    weights: dict[str, dict[str, np.ndarray]] = {}
    binary = [h for h, spec in heads.items() if len(spec.classes) == 2]
    writes = not args.dry_run and (args.update or not args.heads)
    ngram_dir = args.out if writes and not args.update else Path(tempfile.mkdtemp())
    ngram_dir.mkdir(parents=True, exist_ok=True)
    print(f"== char n-gram heads for {binary}")
    ngrams = fit_ngram_heads(
        idf_texts,
        {
            h: (labelled(rows, h, heads[h].sources, "train"),
                labelled(rows, h, heads[h].sources, "val"), heads[h].balance_sources)
            for h in binary
        },
        ngram_dir / NGRAM_FILE,
    )
    manifest["ngram"] = {
        "file": NGRAM_FILE,
        "sha256": file_sha256(ngram_dir / NGRAM_FILE),
        "analyzer": ANALYZER,
        "ngram_range": list(NGRAM_RANGE),
        "n_features": N_FEATURES,
        "heads": binary,
    }
    for head, spec in heads.items():
        print(f"== {head}: {spec.why}")
        model, kind, threshold = trainer.train_head(head, spec)
        weight, at_fpr = 0.0, {}
        if head in binary:
            model, weight, threshold, at_fpr = trainer.fuse(head, spec, model, ngrams)
            kind += f" + char n-gram LR, fuse weight {weight}" if weight else ""
        layers, output = layers_of(model.model if isinstance(model, Fused) else model,
                                   len(spec.classes))
        weights[head] = {
            f"{'W' if i % 2 == 0 else 'b'}{i // 2}": a.astype(np.float32)
            for i, a in enumerate(layers)
        }
        weights[head].update(layers=np.int64(len(layers) // 2), output=np.str_(output))
        thresholds = {spec.classes[1]: round(threshold, 4)} if len(spec.classes) == 2 else {}
        print(f"  chosen: {kind}; thresholds {thresholds} at val FPR {spec.target_fpr}")
        figures = (
            trainer.report_binary(head, model, threshold, spec)
            if len(spec.classes) == 2
            else trainer.report_target(model, spec)
        )
        manifest["heads"][head] = {
            "file": f"{head}.npz",
            "classes": list(spec.classes),
            "languages": list(LANGUAGES),
            "thresholds": thresholds,
            "target_fpr": spec.target_fpr,
            "val_thresholds_at_fpr": at_fpr,
            "fuse_weight": weight,
            "sources": list(spec.sources),
            "licences": {s: hc.SOURCES[s]["licence"] for s in spec.sources},
            "model": kind,
            "description": spec.why,
            "rows": {
                s: dict(
                    Counter(
                        spec.classes[r.labels[head]]
                        for r in rows
                        if head in r.labels and r.corpus in spec.sources and r.split == s
                    )
                )
                for s in hc.SPLITS
            },
            "test_metrics": figures,
        }
    if not args.skip_cross:
        print("== cross-corpus")
        manifest["cross_corpus"] = cross_corpus(trainer)
    if not writes:
        return
    if args.update:
        manifest = updated_manifest(args.out, manifest, ngram_dir / NGRAM_FILE)
    args.out.mkdir(parents=True, exist_ok=True)
    for head, arrays in weights.items():
        path = args.out / f"{head}.npz"
        np.savez_compressed(path, **arrays)  # type: ignore[arg-type]
        manifest["heads"][head]["sha256"] = file_sha256(path)
    (args.out / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")
    TextHeads.load(args.out)  # what we wrote must load
    print(f"wrote {len(weights)} heads to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
