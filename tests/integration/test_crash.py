"""kill -9 the real `grebe run` at random moments, ten times, and lose nothing.

Each round starts `grebe run` (dispatcher + 2 engine processes, local broker, SQLite
store) in its own process group and kills it with SIGKILL: usually while posts are
being processed, sometimes during start-up; half the time the whole group, half the
time only the dispatcher (its engines must then die on their own). After every kill the
invariant is checked on disk: every offset the consumer group has committed belongs to
a post that has its annotation. A last run drains the rest; then every post has exactly
one annotation row and nothing was dead-lettered.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

POSTS = 5000
ROUNDS = 10
GREBE = str(Path(sys.executable).with_name("grebe"))


def _write_config(tmp_path: Path) -> Path:
    config = tmp_path / "grebe.yaml"
    config.write_text(
        json.dumps(
            {
                "data_dir": str(tmp_path / "var"),
                # A QPS cap keeps the 5,000 posts in flight for several seconds however
                # fast the machine is, so every kill round lands mid-stream.
                "streams": [{"name": "posts", "eligibilities": ["basic"], "max_qps": 400}],
                "engine": {"processes": 2, "drain_window_s": 5},
                "metrics": {"enabled": False},
                # Small batches: more commits and more in flight per second to kill.
                "dispatcher": {"max_in_flight": 256, "poll_batch": 64},
            }
        )
    )
    return config


def _ingest(tmp_path: Path, config: Path) -> None:
    posts = tmp_path / "posts.jsonl"
    with posts.open("w") as handle:
        for i in range(POSTS):
            handle.write(json.dumps({"id": f"p{i}", "author_id": "a", "text": f"post number {i}"}))
            handle.write("\n")
    subprocess.run([GREBE, "ingest", str(posts), "-c", str(config)], check=True,
                   capture_output=True, timeout=60)


def _db(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)


def _annotated(tmp_path: Path) -> list[str]:
    return [r[0] for r in _query(tmp_path, "SELECT post_id FROM annotations")]


def _annotation_count(tmp_path: Path) -> int:
    rows = _query(tmp_path, "SELECT count(*) FROM annotations")
    return rows[0][0] if rows else 0


def _query(tmp_path: Path, sql: str) -> list[tuple]:
    path = tmp_path / "var" / "annotations.db"
    if not path.exists():
        return []
    with _db(path) as conn:
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.OperationalError:  # the table is not created yet
            return []


def _committed_post_ids(tmp_path: Path) -> list[str]:
    """Post ids of every message below the group's committed offsets."""
    with _db(tmp_path / "var" / "log.db") as conn:
        rows = conn.execute(
            "SELECT m.value FROM messages m JOIN topics t ON t.id = m.topic_id "
            "JOIN group_offsets g ON g.topic_id = m.topic_id AND g.part = m.part "
            "WHERE t.name = 'posts' AND g.grp = 'grebe' AND m.msg_offset < g.next_offset"
        ).fetchall()
    return [json.loads(value)["id"] for (value,) in rows]


def _group_alive(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group; zombies wait for a reaper that
    may be slow in a container, but they hold no locks and run nothing."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(stat.parent.name))
    return alive


def _wait_group_gone(pgid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while alive := _group_alive(pgid):
        if time.monotonic() > deadline:
            os.killpg(pgid, signal.SIGKILL)
            raise AssertionError(f"processes {alive} outlived the dispatcher")
        time.sleep(0.02)


def _start(config: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [GREBE, "run", "-c", str(config), *args], start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


def test_kill_9_at_random_moments_loses_nothing(tmp_path):
    rng = random.Random(int(os.environ.get("GREBE_CRASH_SEED", "7")))
    config = _write_config(tmp_path)
    _ingest(tmp_path, config)
    kills_mid_processing = 0
    for round_ in range(ROUNDS):
        before = _annotation_count(tmp_path)
        proc = _start(config)
        if round_ % 5 == 4 or before == POSTS:
            time.sleep(rng.uniform(0.1, 2.0))  # somewhere in start-up (or idle)
        else:
            deadline = time.monotonic() + 60
            while _annotation_count(tmp_path) == before and time.monotonic() < deadline:
                assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.15))
            kills_mid_processing += _annotation_count(tmp_path) < POSTS
        if round_ % 2:
            os.kill(proc.pid, signal.SIGKILL)  # the dispatcher only
        else:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL
        _wait_group_gone(proc.pid)
        annotated = set(_annotated(tmp_path))
        print(f"round {round_}: {len(annotated)} annotated")
        unannotated = [p for p in _committed_post_ids(tmp_path) if p not in annotated]
        assert not unannotated, f"round {round_}: committed without annotation: {unannotated[:5]}"

    assert kills_mid_processing >= 6, "the kills should land while posts are processed"
    final = _start(config, "--exit-when-done")
    _, stderr = final.communicate(timeout=120)
    assert final.returncode == 0, stderr.decode()
    annotated = _annotated(tmp_path)
    assert len(annotated) == len(set(annotated)) == POSTS
    assert set(annotated) == {f"p{i}" for i in range(POSTS)}
    assert sorted(_committed_post_ids(tmp_path)) == sorted(annotated)
    with _db(tmp_path / "var" / "log.db") as conn:
        dead = conn.execute(
            "SELECT count(*) FROM messages m JOIN topics t ON t.id = m.topic_id "
            "WHERE t.name = 'dead-letters'"
        ).fetchone()[0]
    assert dead == 0
