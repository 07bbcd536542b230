"""How the `offensive` and `insult` verdicts' signals do on real labelled tweets: the
offensive head alone at a bar, and with a rude word (grebe.flows.rude_words), per
corpus and split; the bar for "head and rude word" is chosen on the val split at the
same false-positive rate as the head alone (`--fpr`, the policy's 1%).

    .venv/bin/python scripts/offensive_rule_eval.py [--fpr 0.01]

Offensive: OLID OFF, Davidson hate/offensive; not: OLID NOT, Davidson neither (ordinary
tweets). Figures to quote are the test split's.
"""

from __future__ import annotations

import argparse

import numpy as np
from heads_corpora import TRAINING, Row
from heads_embed import DEFAULT_CORPORA, EmbeddingCache

from grebe.flows.rude_words import rude_word
from grebe.inference.heads import TextHeads

CORPORA = ("olid", "davidson")


def rows_of(split: str) -> list[Row]:
    return [r for name in CORPORA for r in TRAINING[name](DEFAULT_CORPORA)
            if "offensive" in r.labels and r.split == split]


def scored(heads: TextHeads, cache: EmbeddingCache, rows: list[Row]
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    texts = [r.text for r in rows]
    cache.ensure(texts)
    scores = heads.predict(cache.matrix(texts), texts)["offensive"][:, 1]
    rude = np.array([rude_word(t) is not None for t in texts])
    y = np.array([r.labels["offensive"] for r in rows])
    return scores, rude, y


def bar_at_fpr(scores: np.ndarray, gate: np.ndarray, y: np.ndarray, fpr: float) -> float:
    """The lowest bar at which (gate and score >= bar) flags at most `fpr` of negatives."""
    neg = np.sort(scores[(y == 0) & gate])[::-1]
    allowed = int(np.floor(fpr * int((y == 0).sum())))
    return float(neg[allowed]) + 1e-6 if allowed < len(neg) else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fpr", type=float, default=0.01)
    args = parser.parse_args()
    heads = TextHeads.load(None)
    cache = EmbeddingCache(DEFAULT_CORPORA, heads.embedder)
    s, g, y = scored(heads, cache, rows_of("val"))
    alone = bar_at_fpr(s, np.ones_like(g), y, args.fpr)
    gated = bar_at_fpr(s, g, y, args.fpr)
    print(f"{heads.version}: val bars at FPR {args.fpr}: head alone {alone:.4f}, "
          f"head and rude word {gated:.4f}")
    rows = rows_of("test")
    s, g, y = scored(heads, cache, rows)
    corpus = np.array([r.corpus for r in rows])
    variants = {f"head >= {alone:.3f}": s >= alone, f"head >= {gated:.3f}": s >= gated,
                f"rude & head >= {alone:.3f}": g & (s >= alone),
                f"rude & head >= {gated:.3f}": g & (s >= gated), "rude word alone": g}
    for name in CORPORA:
        idx = corpus == name
        print(f"== {name} test")
        for label, flags in variants.items():
            pos, neg = idx & (y == 1), idx & (y == 0)
            print(f"  {label:22s} recall {flags[pos].mean():.3f}  FPR {flags[neg].mean():.4f} "
                  f"({int(flags[neg].sum())}/{int(neg.sum())})")


if __name__ == "__main__":
    main()
