"""Write HateCheck (held out: never trained on, never used for a threshold) as `grebe eval`
files, one per group of functionalities, so identity-hate recall and the counter-speech
flag rate are measured through the real flows with one command each:

    .venv/bin/python scripts/hatecheck_sets.py --out /tmp/hatecheck
    .venv/bin/grebe eval /tmp/hatecheck/counter_speech.jsonl --label expected --plan post_safety

Groups: `hateful` (every hateful case: expected ["hate"]; threats also ["threat"]),
`counter_speech` (counter_quote_nh, counter_ref_nh, negate_neg_nh: expected []), and
`lookalikes` (the other non-hateful cases: "I hate <object>", neutral and positive
mentions of a group, profanity, abuse of non-protected targets; expected []).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import heads_corpora as hc
from heads_embed import DEFAULT_CORPORA

COUNTER_SPEECH = ("counter_quote_nh", "counter_ref_nh", "negate_neg_nh")


def group_of(row: hc.Row) -> str:
    if row.labels["hate"]:
        return "hateful"
    return "counter_speech" if row.subset in COUNTER_SPEECH else "lookalikes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    files: dict[str, list[str]] = {"hateful": [], "counter_speech": [], "lookalikes": []}
    for row in hc.hatecheck(args.corpora):
        expected = (["hate"] + (["threat"] if row.labels["threat"] else [])
                    if row.labels["hate"] else [])
        files[group_of(row)].append(json.dumps(
            {"text": row.text, "lang": "en", "functionality": row.subset,
             "expected": expected}, ensure_ascii=False))
    for name, lines in files.items():
        (args.out / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"{args.out / name}.jsonl: {len(lines)} cases")


if __name__ == "__main__":
    main()
