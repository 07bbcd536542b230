"""Build bench/data/tweets.jsonl: ordinary real tweets for bench/realflows.py.

Source: Davidson et al. 2017, "Automated Hate Speech Detection and the Problem of
Offensive Language" (github t-davidson/hate-speech-and-offensive-language, MIT licence),
`data/labeled_data.csv`: only the tweets its annotators labelled "neither" (class 2), i.e.
neither hateful nor offensive. Handles and links are kept as written.

    python scripts/make_bench_tweets.py path/to/labeled_data.csv [N]
"""

from __future__ import annotations

import csv
import html
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "bench" / "data" / "tweets.jsonl"
START = 1_717_200_000  # created_at of the first post; one post a second after it


def main(source: str, limit: int = 4200) -> None:
    with open(source, newline="", encoding="utf-8") as handle:
        rows = [row for row in csv.DictReader(handle) if row["class"] == "2"]
    seen: set[str] = set()
    posts = []
    for row in rows:
        text = html.unescape(row["tweet"]).strip()
        if not text or text in seen:
            continue
        seen.add(text)
        i = len(posts)
        posts.append({"id": f"tw-{i:05d}", "author_id": f"author-{i % 700:03d}",
                      "text": text, "created_at": START + i})
        if len(posts) == limit:
            break
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in posts))
    print(f"wrote {len(posts)} posts to {OUT}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))
