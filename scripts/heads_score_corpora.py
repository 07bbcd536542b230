"""Score a set of trained heads (any version) on today's test splits, per corpus, at the
heads' own thresholds: the "before" column when a retrain adds corpora the old heads
never saw (their manifest has no figures for them).

    .venv/bin/python scripts/heads_score_corpora.py --heads DIR [--head hate]

Reads vectors from the embedding cache of the encoder the heads were trained on
(`embedder` in their manifest), so old heads are scored in their own space. Test rows
and HateCheck only: nothing here is fitted or tuned.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np
from heads_embed import DEFAULT_CORPORA, EmbeddingCache
from train_heads import binary_metrics, fmt, load_rows

from grebe.inference.heads import TextHeads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA)
    parser.add_argument("--heads", type=Path, default=None, help="default: packaged heads")
    parser.add_argument("--head", action="append", help="repeatable (default: hate, threat)")
    args = parser.parse_args()
    heads = TextHeads.load(args.heads)
    cache = EmbeddingCache(args.corpora, heads.embedder)
    rows = load_rows(args.corpora)
    print(f"{heads.version} ({heads.embedder})")
    for name in args.head or ["hate", "threat"]:
        info = heads.heads[name]
        limit = info.thresholds[info.classes[1]]
        scored = [r for r in rows if name in r.labels
                  and (r.split == "test" or r.corpus == "hatecheck")]
        texts = [r.text for r in scored]
        flags = heads.predict(cache.matrix(texts), texts)[name][:, 1] >= limit
        by_corpus: dict[str, list[int]] = defaultdict(list)
        for i, row in enumerate(scored):
            by_corpus[row.corpus].append(i)
        print(f"== {name} at {limit:.4f}")
        for corpus, idx in sorted(by_corpus.items()):
            y = np.array([scored[i].labels[name] for i in idx])
            print(f"  {corpus:12s} {fmt(binary_metrics(y, flags[idx]))}")
        for func in ("counter_quote_nh", "counter_ref_nh", "negate_neg_nh", "ident_pos_nh",
                     "target_obj_nh"):
            idx = [i for i, r in enumerate(scored) if r.subset == func]
            if idx:
                print(f"  hatecheck {func}: {flags[idx].mean():.3f} flagged of {len(idx)}")


if __name__ == "__main__":
    main()
