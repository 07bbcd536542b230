"""Where identity-hate recall is lost between the hate head and the flows, per
HateCheck functionality and per corpus split: the judge's hate rules
(grebe.flows.judge) replayed offline on cached vectors, one stage at a time.

    .venv/bin/python scripts/hate_judge_sim.py [--heads DIR] [--split val|test]
        [--sweep]

Stages (each column keeps the previous ones):
  head16   the hate head at its threshold on the training vectors (passes of 16)
  head1    the same on the serving vectors (one text a pass, as the flows embed)
  counter  + the judge's counter-speech rule (`judge.counter_speech`)
  flows    + the judge's target rule (`judge.TARGET_RULE`): what post_safety labels
  remove   flows and the PTOS hate remove bar of the policy

The rules are the judge's own functions and constants, so this replays the flows rather
than a copy of them; `grebe eval` on scripts/hatecheck_sets.py's files is the check that
the replay agrees. HateCheck is held out: read here to report, never to choose.

`--sweep` compares other gates for the `hate` label, each with its threshold put where the
whole rule meets the head's stated FPR on the validation negatives of the head's own
sources (CONAN, evaluation only, and HateCheck are only reported).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from heads_embed import DEFAULT_CORPORA, SERVING_PASS, EmbeddingCache
from train_heads import load_rows

from grebe.flows import judge
from grebe.flows.hostile_words import denies_hostility, hostile_word
from grebe.flows.identity_groups import names_group
from grebe.flows.policy import read_policy
from grebe.inference.heads import TextHeads

COUNTER_SPEECH = ("counter_quote_nh", "counter_ref_nh", "negate_neg_nh")
STAGES = ("head16", "head1", "counter", "flows", "remove")
#: the lowest hate threshold the sweep considers (the counter-speech rule is replayed
#: for every text scoring at least this)
SWEEP_FLOOR = 0.5
SWEEP_STEP = 0.005
#: a score at which the sweep's "waive" gate skips the target rule
WAIVE_TARGET_AT = 0.85


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
        bars = policy.get("defaults", {}).get("head_thresholds", {})
        self.threshold = float(bars.get("hate.hate", info.thresholds["hate"]))
        # the lower bar for a post that says a hostile word (judge._hate_with_hostile_word)
        self.hostile_bar = float(bars.get("hate.hostile", self.threshold))
        self.remove_bar = hate_remove_bar(policy)

    def probs(self, texts: list[str], cache: EmbeddingCache) -> dict[str, np.ndarray]:
        return self.heads.predict(cache.matrix(texts), texts)

    def stages(self, texts: list[str]) -> dict[str, np.ndarray]:
        head16 = self.probs(texts, self.train_cache)["hate"][:, 1] >= self.threshold
        signals = self.signals(texts, min(self.threshold, self.hostile_bar))
        counter, aimed = signals["counter"], signals["aimed"]
        head1 = signals["head1"] | (signals["hostile"] & (signals["score"] >= self.hostile_bar))
        flows = head1 & counter & (aimed | signals["group"])
        return {"head16": head16, "head1": head1, "counter": head1 & counter, "flows": flows,
                "remove": flows & (signals["score"] >= self.remove_bar)}

    def signals(self, texts: list[str], floor: float) -> dict[str, np.ndarray]:
        """Per text: hate score, head at the threshold, not counter-speech (replayed for
        every text scoring >= floor), target rule, P(individual)."""
        probs = self.probs(texts, self.serve_cache)
        score = probs["hate"][:, 1]
        head1 = score >= self.threshold
        denied = {i: judge.denied_statement(t) for i, t in enumerate(texts) if score[i] >= floor}
        own = {i: judge.own_words(texts[i]) for i in denied}
        rewritten = sorted({d for d in [*denied.values(), *own.values()] if d})
        rewritten_score = dict(zip(rewritten, self.probs(rewritten, self.serve_cache)[
            "hate"][:, 1] if rewritten else [], strict=True))
        counter = np.ones(len(texts), dtype=bool)  # True: not counter-speech
        for i, d in denied.items():
            o = own[i]
            if judge.DENOUNCING.search(texts[i]) or denies_hostility(texts[i]) or (
                    o and rewritten_score[o] + judge.NEGATION_MARGIN <= score[i]) or (
                    d and hostile_word(texts[i]) is None
                    and rewritten_score[d] >= score[i] + judge.NEGATION_MARGIN):
                counter[i] = False
        target = probs["target"]
        classes = self.heads.heads["target"].classes
        col = {c: target[:, classes.index(c)] for c in classes}
        aimed = col[judge.GROUP] + col[judge.OTHER] >= col[judge.INDIVIDUAL]
        group = np.array([names_group(t) is not None for t in texts])
        # the lower bar's signal (judge._hate_with_hostile_word): a named identity group
        # and a hostile word said, not denied
        hostile = np.array([names_group(t) is not None and hostile_word(t) is not None
                            for t in texts])
        return {"score": score, "head1": head1, "counter": counter, "aimed": aimed,
                "individual": col[judge.INDIVIDUAL], "group": group, "hostile": hostile}


SHIPPED = "target rule or names a group (shipped)"
GATES: dict[str, Any] = {
    SHIPPED: lambda s: s["aimed"] | s["group"],
    "target rule (before 2026.11.28-1)": lambda s: s["aimed"],
    "no target rule": lambda s: np.ones_like(s["aimed"]),
    f"target rule waived at >= {WAIVE_TARGET_AT}": (
        lambda s: s["aimed"] | (s["score"] >= WAIVE_TARGET_AT)),
    "P(individual) < 0.5": lambda s: s["individual"] < 0.5,
}


def sweep(replay: Replay, val: list, check: list, fpr: float) -> None:
    """Each gate at the lowest threshold whose whole-rule FPR on the validation
    negatives (the head's own sources) is <= fpr; recall on validation, HateCheck."""
    own = [r for r in val if r.corpus != "conan"]
    conan = [r for r in val if r.corpus == "conan"]
    sets = {name: (rows, replay.signals([r.text for r in rows], SWEEP_FLOOR))
            for name, rows in (("own", own), ("conan", conan), ("check", check))}
    print(f"\n| gate (threshold at val FPR {fpr:g}) | threshold | val FPR | val recall | "
          "HateCheck hateful | HateCheck counter-speech | CONAN hate / counter-narratives |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, gate in GATES.items():
        def fired(key: str, t: float, gate=gate) -> np.ndarray:
            s = sets[key][1]
            return (s["score"] >= t) & s["counter"] & gate(s)
        y = {k: np.array([r.labels["hate"] for r in rows]) for k, (rows, _) in sets.items()}
        lowest = next((float(t) for t in np.arange(SWEEP_FLOOR, 1.0, SWEEP_STEP)
                       if fired("own", t)[y["own"] == 0].mean() <= fpr), 1.0)
        # every gate also at the policy's threshold (what the flows run)
        for t in (replay.threshold, lowest):
            row(name, t, fired, y, check)
    two_bars(sets, check, fpr)


def two_bars(sets: dict, check: list, fpr: float) -> None:
    """The shipped gate with two bars: `hate.hate` for any post, the lower `hate.hostile`
    for a post that says a hostile word it does not deny. For each upper bar, the lowest
    lower bar whose whole rule meets `fpr` on the validation negatives; the pair with
    the highest validation recall is the policy's."""
    y = {k: np.array([r.labels["hate"] for r in rows]) for k, (rows, _) in sets.items()}
    best: tuple[float, float, float] | None = None
    for high in np.arange(SWEEP_FLOOR, 1.0, SWEEP_STEP * 2):
        for low in np.arange(SWEEP_FLOOR, high + 1e-9, SWEEP_STEP * 2):
            def fired(key: str, t: float, low: float = float(low),
                      high: float = float(high)) -> np.ndarray:
                s = sets[key][1]
                hit = (s["score"] >= high) | (s["hostile"] & (s["score"] >= low))
                return hit & s["counter"] & (s["aimed"] | s["group"])
            flags = fired("own", 0.0)
            if flags[y["own"] == 0].mean() <= fpr:
                recall = float(flags[y["own"] == 1].mean())
                if best is None or recall > best[0] + 1e-9:
                    best = (recall, float(low), float(high))
                    chosen = fired
                break
    if best is not None:
        row(f"two bars: hate.hostile {best[1]:.3f}, hate.hate", best[2], chosen, y, check)


def row(name: str, t: float, fired: Any, y: dict[str, np.ndarray], check: list) -> None:
    """One gate at threshold t: val FPR and recall, HateCheck, CONAN."""
    own_f, check_f, conan_f = fired("own", t), fired("check", t), fired("conan", t)
    counter_cases = np.isin([r.subset for r in check], COUNTER_SPEECH)
    print(f"| {name} | {t:.3f} | {own_f[y['own'] == 0].mean():.4f} | "
          f"{own_f[y['own'] == 1].mean():.3f} | {check_f[y['check'] == 1].mean():.3f} | "
          f"{check_f[counter_cases].mean():.3f} | {conan_f[y['conan'] == 1].mean():.3f} / "
          f"{conan_f[y['conan'] == 0].mean():.3f} |")


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
    parser.add_argument("--sweep", action="store_true", help="compare gates (validation)")
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
    if args.sweep:
        val = [r for r in rows if r.corpus != "hatecheck" and r.split == "val"]
        sweep(replay, val, check, heads.heads["hate"].target_fpr)


if __name__ == "__main__":
    main()
