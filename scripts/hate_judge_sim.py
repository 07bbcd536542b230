"""Where identity-hate recall is lost between the hate head and the flows, per
HateCheck functionality and per corpus split: the judge's hate rules
(grebe.flows.judge) replayed offline on cached vectors, one stage at a time.

    .venv/bin/python scripts/hate_judge_sim.py [--heads DIR] [--split val|test]

Stages (each column keeps the previous ones):
  head16   the hate head at its threshold on the training vectors (passes of 16)
  head1    the same on the serving vectors (one text a pass, as the flows embed)
  counter  + the judge's counter-speech rule (`judge.counter_speech`)
  flows    + the judge's target rule (`judge.TARGET_RULE`): what post_safety labels
  remove   flows and the PTOS hate remove bar of the policy

The rules are the judge's own functions and constants, so this replays the flows rather
than a copy of them; `grebe eval` on scripts/hatecheck_sets.py's files is the check that
the replay agrees. HateCheck is held out: read here to report, never to choose.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np
from heads_embed import DEFAULT_CORPORA, SERVING_PASS, EmbeddingCache
from train_heads import load_rows

from grebe.flows import judge
from grebe.flows.policy import read_policy
from grebe.inference.heads import TextHeads

STAGES = ("head16", "head1", "counter", "flows", "remove")


def hate_remove_bar(policy: dict) -> float:
    """The lowest score at which PTOS removes a post for hate (policy.yaml)."""
    rules = policy["safety_ptos"]["policies"]["hate"]
    return min(float(r["min_score"]) for r in rules if r["action"] == "remove")


class Replay:
    """The judge's hate decision for many texts at once, on cached vectors."""

    def __init__(self, heads: TextHeads, root: Path, policy: dict) -> None:
        self.heads = heads
        self.train_cache = EmbeddingCache(root, heads.embedder)
        self.serve_cache = EmbeddingCache(root, heads.embedder, run_batch_size=SERVING_PASS)
        info = heads.heads["hate"]
        self.threshold = float(policy.get("defaults", {}).get("head_thresholds", {}).get(
            "hate.hate", info.thresholds["hate"]))
        self.remove_bar = hate_remove_bar(policy)

    def probs(self, texts: list[str], cache: EmbeddingCache) -> dict[str, np.ndarray]:
        return self.heads.predict(cache.matrix(texts), texts)

    def stages(self, texts: list[str]) -> dict[str, np.ndarray]:
        head16 = self.probs(texts, self.train_cache)["hate"][:, 1] >= self.threshold
        probs = self.probs(texts, self.serve_cache)
        score = probs["hate"][:, 1]
        head1 = score >= self.threshold
        denied = {i: judge.denied_statement(t) for i, t in enumerate(texts) if head1[i]}
        denied_texts = sorted({d for d in denied.values() if d})
        denied_score = dict(zip(denied_texts, self.probs(denied_texts, self.serve_cache)[
            "hate"][:, 1] if denied_texts else [], strict=True))
        counter = head1.copy()
        for i, d in denied.items():
            if judge.DENOUNCING.search(texts[i]) or (
                    d and denied_score[d] >= score[i] + judge.NEGATION_MARGIN):
                counter[i] = False
        target = probs["target"]
        classes = self.heads.heads["target"].classes
        col = {c: target[:, classes.index(c)] for c in classes}
        aimed = col[judge.GROUP] + col[judge.OTHER] >= col[judge.INDIVIDUAL]
        flows = counter & aimed
        return {"head16": head16, "head1": head1, "counter": counter, "flows": flows,
                "remove": flows & (score >= self.remove_bar)}


def table(title: str, keys: list[str], stages: dict[str, np.ndarray]) -> None:
    """Share flagged per key (functionality or corpus/label) at every stage."""
    by: dict[str, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        by[k].append(i)
    print(f"\n{title}\n| set | n | " + " | ".join(STAGES) + " |")
    print("|---|---:|" + "---:|" * len(STAGES))
    for k in sorted(by):
        idx = by[k]
        cells = " | ".join(f"{stages[s][idx].mean():.3f}" for s in STAGES)
        print(f"| {k} | {len(idx)} | {cells} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA)
    parser.add_argument("--heads", type=Path, default=None, help="default: packaged heads")
    parser.add_argument("--split", default="val", choices=("val", "test"))
    args = parser.parse_args()
    heads = TextHeads.load(args.heads)
    replay = Replay(heads, args.corpora, read_policy(None)[1])
    rows = [r for r in load_rows(args.corpora) if "hate" in r.labels]
    print(f"{heads.version}: hate threshold {replay.threshold:.4f}, "
          f"remove bar {replay.remove_bar:.4f}")
    check = [r for r in rows if r.corpus == "hatecheck"]
    found = replay.stages([r.text for r in check])
    table("HateCheck (held out), share flagged per functionality",
          [r.subset for r in check], found)
    hateful = [i for i, r in enumerate(check) if r.labels["hate"]]
    print("HateCheck hateful recall: " + ", ".join(
        f"{s} {found[s][hateful].mean():.3f}" for s in STAGES))
    split = [r for r in rows if r.corpus != "hatecheck" and r.split == args.split]
    found = replay.stages([r.text for r in split])
    table(f"{args.split} split, share flagged per corpus and label",
          [f"{r.corpus}/{'hate' if r.labels['hate'] else 'none'}" for r in split], found)


if __name__ == "__main__":
    main()
