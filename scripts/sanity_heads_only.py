"""The flows' sanity set (tests/flows/data/sanity_edges.jsonl) judged by the raw heads
alone, per post, with the same agreement rule as tests/flows/test_sanity_edges_real.py:
each head at its own validation threshold, `insult` = offensive and target individual
>= 0.5, no flow rule. Comparing this with the through-the-flows figure on the same set
says whether the flows lose or add anything over the heads (docs/quality.md).

    .venv/bin/python scripts/sanity_heads_only.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "flows"))

from test_sanity_edges_real import DATA, agrees  # noqa: E402

from grebe.inference.heads import TextHeads  # noqa: E402
from grebe.inference.minilm import MiniLMModel  # noqa: E402

BINARY = ("spam", "offensive", "hate", "threat")
INDIVIDUAL_AT = 0.5  # the policy's target.individual


def main() -> None:
    heads, model = TextHeads.load(), MiniLMModel(intra_op_threads=1)
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    texts = [row["text"] for row in rows]
    probs = heads.predict(model.encode(texts), texts)
    limits = {h: heads.heads[h].thresholds[heads.heads[h].classes[1]] for h in BINARY}
    agreed = 0
    for i, row in enumerate(rows):
        labels = {h for h in BINARY if probs[h][i, 1] >= limits[h]}
        if "offensive" in labels and probs["target"][i, 1] >= INDIVIDUAL_AT:
            labels.add("insult")
        ok = agrees(set(row["expected"]), labels)
        agreed += ok
        if not ok:
            print(f"miss: expected {row['expected']}, heads {sorted(labels)}: {row['text']}")
    print(f"heads alone, per post: {agreed}/{len(rows)} = {agreed / len(rows):.3f}")


if __name__ == "__main__":
    main()
