"""Bytes per post as written, alone: the bytes part of `bench/realflows.py`, without its
CPU, latency and model-limit runs, so one storage change can be measured in a minute.

    .venv/bin/python bench/bytes_per_post.py [--posts 600] [--keep DIR] [--json]

Real tweets (bench/data/tweets.jsonl) through the six default text flows, exactly as a
user runs them (`grebe ingest`, `grebe run --exit-when-done`, local broker, SQLite
store); then every SQLite file's WAL is checkpointed and it prints the bytes per post on
disk (log + store + hydration posts), split by file, by topic of the local log, and by
table and index (SQLite's `dbstat`: the pages each one takes and the payload in them,
the difference being page slack), and what the log holds once the output topic has aged
out. Same helpers as `bench/realflows.py`, so the two print the same figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

import realflows


def table_split(db: Path, n: int) -> dict[str, tuple[float, float]]:
    """name -> (bytes of pages per post, bytes of payload per post) for every table and
    index of one SQLite file (its free pages under "(free)")."""
    out: dict[str, tuple[float, float]] = {}
    with contextlib.closing(sqlite3.connect(db)) as conn:
        for name, pages, payload in conn.execute(
                "SELECT name, sum(pgsize), sum(payload) FROM dbstat GROUP BY name"):
            out[name] = (pages / n, payload / n)
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        out["(free)"] = (free * page_size / n, 0.0)
    return out


def run(n: int, keep: Path | None) -> dict:
    data_dir = Path(tempfile.mkdtemp(prefix="grebe-bytes-"))
    config = realflows.write_config(data_dir, realflows.FLOWS, None)
    realflows.ingest(config, realflows.posts_file(n, data_dir, "t"))
    started = time.time()
    subprocess.run([realflows.GREBE, "run", "-c", str(config), "--exit-when-done"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=realflows.CHILD_ENV)
    wall = time.time() - started
    realflows.checkpoint(data_dir)
    on_disk = sum(realflows._size(f) for f in realflows.data_files(data_dir))
    figures = {
        "posts": n, "wall_s": wall, "bytes_per_post": on_disk / n,
        "split": realflows.disk_split(data_dir, n),
        "log_once_output_aged_out": realflows.log_once_output_aged_out(data_dir, n),
        "tables": {db.stem: table_split(db, n) for db in sorted(data_dir.glob("*.db"))},
    }
    if keep is not None:
        shutil.copytree(data_dir, keep, dirs_exist_ok=True)
    shutil.rmtree(data_dir, ignore_errors=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--posts", type=int, default=600)
    parser.add_argument("--keep", type=Path, default=None, help="copy the data dir here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    realflows.use_bytecode()
    load = Path("/proc/loadavg").read_text().split()[0]
    figures = run(args.posts, args.keep)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    split = figures["split"]
    steady = figures["bytes_per_post"] - split.get("log", 0.0) + figures[
        "log_once_output_aged_out"]
    print(f"{args.posts} real tweets, six flows, load average {load} at start, "
          f"run {figures['wall_s']:.1f} s")
    print(f"  on disk, as written   {figures['bytes_per_post']:8.0f} bytes per post")
    for name, size in split.items():
        print(f"    {name:<26}{size:8.0f}")
    print(f"  once the output topic aged out {steady:8.0f} "
          f"(log {figures['log_once_output_aged_out']:.0f})")
    for db, tables in figures["tables"].items():
        print(f"  {db}.db by table (pages / payload bytes per post)")
        for name, (pages, payload) in sorted(tables.items(), key=lambda t: -t[1][0]):
            if pages:
                print(f"    {name:<34}{pages:8.0f} {payload:8.0f}")


if __name__ == "__main__":
    main()
