"""Write `grebe eval` files that check grebe.flows.spelling on data it was not chosen on:
the validation split's hate (Davidson, ETHOS) and ordinary tweets (Davidson "neither",
OLID NOT), each with one word obfuscated the way evaders do (leet, spaced letters, a
letter dropped, two letters swapped, two words run together). Hateful rows get one of
their charged words obfuscated (each kind once), ordinary rows any word (one random
kind), so the files measure both what restoring wins and what it costs:

    .venv/bin/python scripts/spelling_sets.py --out /tmp/spelling
    .venv/bin/grebe eval /tmp/spelling/hate_obfuscated.jsonl --label expected --plan post_safety
    .venv/bin/grebe eval /tmp/spelling/ordinary_obfuscated.jsonl --label expected \\
        --plan post_safety --plan spam_comment --plan safety_ptos

`hate_plain.jsonl` holds the same hateful rows as written (the ceiling).
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Callable
from pathlib import Path

import heads_corpora as hc
from heads_embed import DEFAULT_CORPORA

from grebe.flows import spelling

LEET = {"o": "0", "i": "1", "e": "3", "a": "4", "s": "5", "t": "7"}
WORD = re.compile(r"(?<![\w@#])[A-Za-z]{4,}(?!\w)")


def leet(word: str, rng: random.Random) -> str | None:
    spots = [i for i, ch in enumerate(word.lower()) if ch in LEET]
    if not spots:
        return None
    i = rng.choice(spots)
    return word[:i] + LEET[word[i].lower()] + word[i + 1:]


def spaced(word: str, rng: random.Random) -> str:
    return " ".join(word)


def dropped(word: str, rng: random.Random) -> str:
    i = rng.randrange(1, len(word))
    return word[:i] + word[i + 1:]


def swapped(word: str, rng: random.Random) -> str:
    i = rng.randrange(1, len(word) - 1)
    return word[:i] + word[i + 1] + word[i] + word[i + 2:]


KINDS: dict[str, Callable[[str, random.Random], str | None]] = {
    "leet": leet, "spaced": spaced, "dropped": dropped, "swapped": swapped}


def obfuscate(text: str, kind: str, rng: random.Random, *, charged_only: bool) -> str | None:
    """`text` with one word obfuscated by `kind` (or run into the next word), or None."""
    words = [m for m in WORD.finditer(text) if spelling.charged(m.group(0)) or not charged_only]
    if not words:
        return None
    found = rng.choice(words)
    if kind == "run_together":
        return (text[:found.end()] + text[found.end() + 1:]
                if text[found.end():found.end() + 1] == " " else None)
    new = KINDS[kind](found.group(0), rng)
    if new is None or new == found.group(0):
        return None
    return text[:found.start()] + new + text[found.end():]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--split", default="val", choices=("val", "test"))
    args = parser.parse_args()
    rng = random.Random(7)
    kinds = [*KINDS, "run_together"]
    files: dict[str, list[dict[str, object]]] = {
        "hate_plain": [], "hate_obfuscated": [], "ordinary_obfuscated": []}
    for source in (hc.davidson, hc.olid, hc.ethos):
        for row in source(args.corpora):
            if row.split != args.split:
                continue
            if row.labels.get("hate") == 1:
                files["hate_plain"].append({"text": row.text, "expected": ["hate"]})
                for kind in kinds:
                    text = obfuscate(row.text, kind, rng, charged_only=True)
                    if text is not None:
                        files["hate_obfuscated"].append(
                            {"text": text, "kind": kind, "expected": ["hate"]})
            elif row.subset in ("neither", "NOT"):
                kind = rng.choice(kinds)
                text = obfuscate(row.text, kind, rng, charged_only=False)
                if text is not None:
                    files["ordinary_obfuscated"].append(
                        {"text": text, "kind": kind, "expected": []})
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in files.items():
        lines = [json.dumps({"lang": "en", **row}, ensure_ascii=False) for row in rows]
        (args.out / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"{args.out / name}.jsonl: {len(lines)} rows")


if __name__ == "__main__":
    main()
