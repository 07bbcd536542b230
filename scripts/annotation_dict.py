"""Train the zstd dictionaries the SQLite store compresses annotation bodies against
(`--kind body`), the local log compresses message values against (`--kind log`) and
the hydration post table compresses posts against (`--kind post`).

    .venv/bin/python scripts/annotation_dict.py --first 2000 --posts 1000 --size 8192 \\
        --out src/grebe/data/annotation_body.3.zdict --dict-id 3
    .venv/bin/python scripts/annotation_dict.py --kind log --size 16384 \\
        --out src/grebe/data/log_value.102.zdict --dict-id 102
    .venv/bin/python scripts/annotation_dict.py --kind post \\
        --out src/grebe/data/post_body.201.zdict --dict-id 201

Runs the six default text flows on real tweets (bench/data/tweets.jsonl lines
`--first` .. `--first + --posts`, none of the first 600 that `bench/realflows.py`
measures) exactly as a user does (`grebe ingest`, `grebe run --exit-when-done`, SQLite
store), reads the msgpack bodies back (or every value of the local log: the input
posts and the output topic's annotations; or the post table's bodies) and trains a
`--size`-byte dictionary on them.

A shipped dictionary is never edited or replaced: rows name it by id. Ship a better one
as a new file with a new `--dict-id` and point `BODY_DICT_ID` (`LOG_DICT_ID`,
`POST_DICT_ID`: constants.py) at it.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
import zstandard

ROOT = Path(__file__).resolve().parent.parent
TWEETS = ROOT / "bench" / "data" / "tweets.jsonl"
GREBE = str(Path(sys.executable).parent / "grebe")
FLOWS = ["spam_comment", "post_safety", "safety_ptos", "banger_initial_screen",
         "post_embedding_with_summary", "mm_emb_v5"]


def annotate(first: int, posts: int, data_dir: Path) -> Path:
    config = data_dir / "grebe.yaml"
    config.write_text(yaml.safe_dump({
        "data_dir": str(data_dir), "metrics": {"enabled": False},
        # raw values, so the log's samples need no dictionary (the one being trained)
        "local": {"compress_values": False},
        "streams": [{"name": "dict", "topic": "posts", "eligibilities": FLOWS}],
        "plans": {"factory": "grebe.flows.registry:build_bundle"}}))
    lines = TWEETS.read_text().splitlines()[first:first + posts]
    source = data_dir / "posts.jsonl"
    source.write_text("".join(
        json.dumps({**json.loads(line), "id": f"dict-{first + i}"}) + "\n"
        for i, line in enumerate(lines)))
    subprocess.run([GREBE, "ingest", str(source), "-c", str(config)], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([GREBE, "run", "-c", str(config), "--exit-when-done"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return data_dir


def bodies(data_dir: Path) -> list[bytes]:
    """The msgpack bodies, as the store writes them before compressing."""
    from grebe.stores import bodies as codec

    with sqlite3.connect(data_dir / "annotations.db") as conn:
        rows = [bytes(b) for (b,) in conn.execute("SELECT body FROM annotations")]
    return [codec.decompress(b) if codec.is_compressed(b) else b for b in rows
            if b[:1] != b"{"]


def log_values(data_dir: Path) -> list[bytes]:
    """Every message value of the local log, as appended (the run stores them raw)."""
    with sqlite3.connect(data_dir / "log.db") as conn:
        return [bytes(v) for (v,) in conn.execute("SELECT value FROM messages")]


def post_bodies(data_dir: Path) -> list[bytes]:
    """The post table's bodies as JSON (a whole Post, defaults included: a dictionary
    trained with the log's values leaves their common tail out)."""
    with sqlite3.connect(data_dir / "posts.db") as conn:
        rows = [bytes(b) for (b,) in conn.execute("SELECT body FROM posts")]
    if all(b[:1] == b"{" for b in rows):  # a tree before compressed posts wrote them
        return rows
    from grebe.hydration.sqlite import _body

    return [_body(b) for b in rows]


SAMPLES = {"body": bodies, "log": log_values, "post": post_bodies}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=sorted(SAMPLES), default="body")
    parser.add_argument("--first", type=int, default=2000)
    parser.add_argument("--posts", type=int, default=1000)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--dict-id", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="grebe-dict-") as tmp:
        data_dir = annotate(args.first, args.posts, Path(tmp))
        samples = SAMPLES[args.kind](data_dir)
    if len(samples) < args.posts:
        raise SystemExit(f"only {len(samples)} samples from {args.posts} posts")
    trained = zstandard.train_dictionary(args.size, samples, dict_id=args.dict_id)
    args.out.write_bytes(trained.as_bytes())
    print(f"{len(samples)} {args.kind} samples -> {args.out} ({len(trained.as_bytes())} bytes, "
          f"id {trained.dict_id()})")


if __name__ == "__main__":
    main()
