"""Print the text heads' figures from their manifest as the markdown tables of docs/quality.md.

    .venv/bin/python scripts/heads_report.py [path/to/heads]

The figures are the ones `scripts/train_heads.py` measured and wrote into manifest.json
(test splits and held-out sets only), so the doc and the shipped weights cannot drift.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from grebe.inference.heads import MANIFEST, packaged_heads_dir


def row(name: str, m: dict[str, Any]) -> str:
    return (
        f"| {name} | {m['n']:,} | {m['precision']:.3f} | {m['recall']:.3f} | {m['f1']:.3f} "
        f"| {m['fpr']:.4f} | {m['tp']} / {m['fp']} / {m['fn']} / {m['tn']} |"
    )


HEADER = (
    "| test set | n | precision | recall | F1 | FPR | tp / fp / fn / tn |\n"
    "|---|---:|---:|---:|---:|---:|---|"
)


def binary_tables(name: str, spec: dict[str, Any]) -> list[str]:
    figures = spec["test_metrics"]
    positive = spec["classes"][1]
    out = [
        f"### `{name}` {spec['classes']}",
        "",
        f"{spec['description']}. Model: {spec['model']}; threshold "
        f"{spec['thresholds'][positive]} (chosen on val at FPR {spec['target_fpr']}). "
        f"Rows (train / val / test): "
        + " / ".join(
            ", ".join(f"{k} {v:,}" for k, v in spec["rows"][s].items())
            for s in ("train", "val", "test")
        )
        + ".",
        "",
        HEADER,
    ]
    for key, m in figures.items():
        if key.startswith("test:") or key == "hatecheck:all":
            label = (
                key.split(":", 1)[1]
                if key.startswith("test:")
                else "HateCheck (held out, all 3,728)"
            )
            out.append(row(label, m))
    benign = [(k.split(":", 1)[1], v) for k, v in figures.items() if k.startswith("benign_fpr:")]
    if benign:
        out += [
            "",
            "Flagged among ordinary benign posts (test split): "
            + "; ".join(f"{k} {v['fpr']:.2%} of {v['n']:,}" for k, v in benign)
            + ".",
        ]
    if "hatecheck:flag_rate" in figures:
        rates = figures["hatecheck:flag_rate"]
        out += [
            "",
            "HateCheck share flagged per functionality (`_h` hateful, `_nh` not): "
            + ", ".join(f"{f} {v:.2f}" for f, v in rates.items())
            + ".",
        ]
    return [*out, ""]


def target_tables(spec: dict[str, Any]) -> list[str]:
    out = [
        f"### `target` {spec['classes']}",
        "",
        f"{spec['description']}. Model: {spec['model']}; "
        "argmax (no thresholds: read it only when `offensive` fires).",
        "",
        "| test set | class | n | precision | recall | F1 |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for key, fig in spec["test_metrics"].items():
        for cls, m in fig["per_class"].items():
            out.append(
                f"| {key[5:]} (accuracy {fig['accuracy']:.3f}) | {cls} | {m['tp'] + m['fn']} "
                f"| {m['precision']:.3f} | {m['recall']:.3f} | {m['f1']:.3f} |"
            )
    return [*out, ""]


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else packaged_heads_dir()
    manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    lines = [f"Version `{manifest['version']}`, embedder `{manifest['embedder']}`.", ""]
    for name, spec in manifest["heads"].items():
        lines += target_tables(spec) if name == "target" else binary_tables(name, spec)
    if "cross_corpus" in manifest:
        lines += [
            "### Cross-corpus (fitted on one corpus, tested on another)",
            "",
            HEADER.replace("test set", "head: trained on -> tested on"),
        ]
        lines += [row(k, m) for k, m in manifest["cross_corpus"].items()]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
