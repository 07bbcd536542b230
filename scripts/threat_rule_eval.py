"""How the `threat` verdict's two signals do on real labelled text, per corpus and split:
the threat head alone, the threat grammar alone (grebe.flows.threat_speech), and the
grammar with the head at a floor, which is what the flows ship.

    .venv/bin/python scripts/threat_rule_eval.py [--split test] [--floors 0,0.1,0.2,0.3]

Threats: ThreatGram level 2, ETHOS `violence`, HateCheck's threat cases. Non-threats:
ThreatGram levels 0-1 (political rage, calls for legal punishment), ETHOS, HateCheck's
other cases, and ordinary tweets (Davidson "neither", OLID NOT). The grammar was written
from the linguistics of threats and checked on the train/val splits; figures to quote are
the test split's and HateCheck's (never used to choose anything).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np
from heads_corpora import HELD_OUT, TRAINING, Row
from heads_embed import DEFAULT_CORPORA, EmbeddingCache

from grebe.flows.threat_speech import SHAPED_FLOOR, judge_threat, threat_shape
from grebe.inference.heads import TextHeads

CORPORA = ("threatgram", "ethos", "davidson", "olid", "hatecheck")


def threat_rows(split: str) -> list[Row]:
    readers = {**TRAINING, **HELD_OUT}
    rows = [r for name in CORPORA for r in readers[name](DEFAULT_CORPORA) if "threat" in r.labels]
    return [r for r in rows if r.corpus == "hatecheck" or r.split == split]


def rates(y: np.ndarray, flags: np.ndarray) -> str:
    pos, neg = y == 1, y == 0
    recall = f"recall {flags[pos].mean():.3f} ({int(flags[pos].sum())}/{int(pos.sum())})" \
        if pos.any() else "recall -"
    fpr = f"FPR {flags[neg].mean():.4f} ({int(flags[neg].sum())}/{int(neg.sum())})" \
        if neg.any() else "FPR -"
    return f"{recall:28s} {fpr}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="test", choices=("train", "val", "test"))
    parser.add_argument("--floors", default=f"0,0.1,0.2,{SHAPED_FLOOR},0.4")
    parser.add_argument("--show", type=int, default=0, help="print N misses and N false flags")
    parser.add_argument("--heads", type=Path, default=None, help="default: packaged heads")
    args = parser.parse_args()
    heads = TextHeads.load(args.heads)
    rows = threat_rows(args.split)
    texts = [r.text for r in rows]
    cache = EmbeddingCache(DEFAULT_CORPORA, heads.embedder)
    cache.ensure(texts)
    info = heads.heads["threat"]
    scores = heads.predict(cache.matrix(texts), texts)["threat"][:, 1]
    limit = info.thresholds["threat"]
    shaped = np.array([threat_shape(t) is not None for t in texts])
    variants = {f"head >= {limit:.3f}": scores >= limit, "grammar": shaped}
    for floor in (float(f) for f in args.floors.split(",")):
        variants[f"grammar & head >= {floor:g}"] = shaped & (scores >= floor)
    variants["shipped verdict"] = np.array(
        [judge_threat(t, float(s), limit)[0] for t, s in zip(texts, scores, strict=True)])
    groups: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        name = row.corpus if row.corpus != "hatecheck" else "hatecheck"
        groups[name].append(i)
        if row.corpus in ("davidson", "olid"):
            groups["ordinary tweets"].append(i)
    y = np.array([r.labels["threat"] for r in rows])
    print(f"{heads.version}, split {args.split}")
    for name, idx in groups.items():
        print(f"== {name}")
        for label, flags in variants.items():
            print(f"  {label:24s} {rates(y[idx], flags[idx])}")
    if args.show:
        chosen = variants[list(variants)[-1]]
        misses = [i for i in range(len(rows)) if y[i] == 1 and not chosen[i]]
        false = [i for i in range(len(rows)) if y[i] == 0 and chosen[i]]
        rng = np.random.default_rng(0)
        for title, pick in (("missed", misses), ("false flags", false)):
            print(f"== {title} (sample)")
            for i in rng.permutation(pick)[: args.show]:
                print(f"  [{rows[i].corpus} {scores[i]:.2f}] {texts[i][:140]!r} "
                      f"{threat_shape(texts[i])}")


if __name__ == "__main__":
    main()
