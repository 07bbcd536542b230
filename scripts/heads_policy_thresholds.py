"""Print each binary head's threshold at several validation false-positive rates, read
through the served code (`TextHeads.predict`, fused with the char n-grams), so a
policy can set `head_thresholds` at another FPR than the head's own without a retrain:

    .venv/bin/python scripts/heads_policy_thresholds.py [--heads DIR]

policy.yaml's `offensive.offensive` is the offensive head's threshold at FPR 1% (its
own is at 2%): every retrain of the heads must re-read it here, or the policy keeps a
threshold chosen for other weights. Validation rows only; test splits stay unseen.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import heads_corpora as hc
import numpy as np
from heads_embed import DEFAULT_CORPORA, EmbeddingCache
from heads_spec import HEADS
from train_heads import OPERATING_FPRS, labelled, load_rows, threshold_at

from grebe.inference.heads import TextHeads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA)
    parser.add_argument("--heads", type=Path, default=None, help="default: packaged heads")
    parser.add_argument("--fpr", type=float, action="append", default=[],
                        help="another FPR to print (e.g. 0.0028: the PTOS hate remove bar)")
    args = parser.parse_args()
    heads = TextHeads.load(args.heads)
    rows = [r for r in load_rows(args.corpora) if r.corpus != "hatecheck"]
    cache = EmbeddingCache(args.corpora, heads.embedder)
    print(f"{heads.version} ({heads.embedder}): validation thresholds per FPR")
    for name, info in heads.heads.items():
        if len(info.classes) != 2:
            continue
        val: list[hc.Row] = labelled(rows, name, HEADS[name].sources, "val")
        texts = [r.text for r in val]
        y = np.array([r.labels[name] for r in val])
        scores = heads.predict(cache.matrix(texts), texts)[name][:, 1]
        cells = []
        for fpr in sorted({*OPERATING_FPRS, *args.fpr}):
            limit = threshold_at(scores[y == 0], fpr)
            recall = float((scores[y == 1] >= limit).mean())
            cells.append(f"FPR {fpr:g}: {limit:.4f} (recall {recall:.3f})")
        print(f"  {name:10s} " + "; ".join(cells))


if __name__ == "__main__":
    main()
