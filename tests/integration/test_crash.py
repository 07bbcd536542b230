"""kill -9 the real `grebe run` at random moments, ten times, and lose nothing.

Each round starts `grebe run` (dispatcher + 2 engine processes, local broker, SQLite
store) in its own process group and kills it with SIGKILL: usually while posts are
being processed, sometimes during start-up; half the time the whole group, half the
time only the dispatcher (its engines must then die on their own).

The plan is the built-in `basic` plan wrapped by `recording_plan`, which logs every
start and every finish of a post's processing and holds every 25th post for half a second,
so finished posts always sit next to unfinished ones when a kill lands. At-least-once
is then checked as what it means, not by counting upserted rows (which cannot show a
duplicate):

- after every kill, every post below a committed offset has finished processing and
  has its annotation (committing past an unfinished post, or acking a post when it is
  submitted, fails here);
- posts were in flight (started, not finished) at the kill, in at least six rounds;
- a post committed before a kill is never processed again after it, and a post is
  processed more than once only if it was started and left uncommitted at a kill;
- a last run drains the rest: every post processed, annotated and committed, nothing
  dead-lettered.

Child output goes to a file per run (a pipe nobody reads blocks the child after 64 KB)
and its tail is shown when an assertion fails. The mutation recipe in docs/testing.md
shows this test failing on both deliberate bugs above.
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

from grebe.brokers.local_sql import unpack_value
from recording_plan import DONE, START, assert_reprocessing_explained_by_kills, read_log

pytestmark = pytest.mark.slow

POSTS = 4000
ROUNDS = 10
SLOW_EVERY = 25
GREBE = str(Path(sys.executable).with_name("grebe"))
HERE = Path(__file__).resolve().parents[1]  # tests/: recording_plan.py


def _write_config(tmp_path: Path) -> Path:
    config = tmp_path / "grebe.yaml"
    config.write_text(
        json.dumps(
            {
                "data_dir": str(tmp_path / "var"),
                # A QPS cap keeps the posts in flight for several seconds however fast
                # the machine is, so every kill round lands mid-stream.
                "streams": [{"name": "posts", "eligibilities": ["basic"], "max_qps": 400}],
                "engine": {"processes": 2, "drain_window_s": 5},
                "metrics": {"enabled": False},
                # Small batches: more commits and more in flight per second to kill.
                "dispatcher": {"max_in_flight": 256, "poll_batch": 64},
                "plans": {
                    "factory": "recording_plan:build_bundle",
                    "recording": {"log": str(_log_path(tmp_path)), "slow_every": SLOW_EVERY,
                                  "slow_s": 0.5},
                },
            }
        )
    )
    return config


def _log_path(tmp_path: Path) -> Path:
    return tmp_path / "processing.log"


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
            "SELECT m.value, m.codec FROM messages m JOIN topics t ON t.id = m.topic_id "
            "JOIN group_offsets g ON g.topic_id = m.topic_id AND g.part = m.part "
            "WHERE t.name = 'posts' AND g.grp = 'grebe' AND m.msg_offset < g.next_offset"
        ).fetchall()
    return [json.loads(unpack_value(value, kind))["id"] for value, kind in rows]


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


def _start(config: Path, out: Path, *args: str) -> subprocess.Popen[bytes]:
    """Start `grebe run` with its output in `out`, never in an unread pipe."""
    with out.open("ab") as handle:
        return subprocess.Popen(
            [GREBE, "run", "-c", str(config), *args], start_new_session=True,
            stdout=handle, stderr=handle,
            env={**os.environ, "PYTHONUNBUFFERED": "1",
                 "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE),
                                                             os.environ.get("PYTHONPATH")]))},
        )


def _tail(out: Path, chars: int = 4000) -> str:
    return out.read_text(errors="replace")[-chars:] if out.exists() else "(no output)"


def _starts(tmp_path: Path) -> int:
    return sum(1 for event, _ in read_log(_log_path(tmp_path)) if event == START)


def _slow_in_flight(events: list[tuple[str, str]]) -> bool:
    started = {post for event, post in events if event == START}
    done = {post for event, post in events if event == DONE}
    return any(int(post[1:]) % SLOW_EVERY == 0 for post in started - done)


def test_kill_9_at_random_moments_loses_nothing(tmp_path):
    rng = random.Random(int(os.environ.get("GREBE_CRASH_SEED", "7")))
    config = _write_config(tmp_path)
    _ingest(tmp_path, config)
    log = _log_path(tmp_path)
    kills_in_flight = 0
    # Per kill: how many log lines existed once the group was gone, and what was committed.
    kills: list[tuple[int, set[str]]] = []
    for round_ in range(ROUNDS):
        out = tmp_path / f"run-{round_}.log"
        before = _starts(tmp_path)
        proc = _start(config, out)
        if round_ % 5 == 4 or before >= POSTS:
            time.sleep(rng.uniform(0.1, 2.0))  # somewhere in start-up (or idle)
        else:
            deadline = time.monotonic() + 60
            while _starts(tmp_path) < before + 300 and time.monotonic() < deadline:
                assert proc.poll() is None, _tail(out)
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 1.0))
            # Kill while a held (slow) post of this run is unfinished: a moment when
            # finished posts sit above an unfinished one in its partition.
            log_end = kills[-1][0] if kills else 0
            while not _slow_in_flight(read_log(log)[log_end:]):
                assert proc.poll() is None and time.monotonic() < deadline, _tail(out)
                time.sleep(0.005)
        if round_ % 2:
            os.kill(proc.pid, signal.SIGKILL)  # the dispatcher only
        else:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL
        _wait_group_gone(proc.pid)

        events = read_log(log)
        started = {post for event, post in events if event == START}
        finished = {post for event, post in events if event == DONE}
        committed = set(_committed_post_ids(tmp_path))
        annotated = set(_annotated(tmp_path))
        this_round = events[kills[-1][0] if kills else 0:]
        in_flight = ({post for event, post in this_round if event == START}
                     - {post for event, post in this_round if event == DONE})
        kills.append((len(events), committed))
        kills_in_flight += bool(in_flight)
        print(f"round {round_}: {len(started)} started, {len(finished)} finished, "
              f"{len(committed)} committed, {len(in_flight)} in flight at the kill")
        unfinished = sorted(committed - finished)
        assert not unfinished, (
            f"round {round_}: committed before processing finished: {unfinished[:5]}\n"
            + _tail(out)
        )
        unannotated = sorted(committed - annotated)
        assert not unannotated, (
            f"round {round_}: committed without annotation: {unannotated[:5]}\n" + _tail(out)
        )

    assert kills_in_flight >= 6, "the kills should land while posts are processed"
    out = tmp_path / "final.log"
    final = _start(config, out, "--exit-when-done")
    final.wait(timeout=120)
    assert final.returncode == 0, _tail(out)

    every = {f"p{i}" for i in range(POSTS)}
    events = read_log(log)
    assert {post for event, post in events if event == DONE} == every, "posts never processed"
    annotated = _annotated(tmp_path)
    assert set(annotated) == every
    assert sorted(_committed_post_ids(tmp_path)) == sorted(every)
    reprocessed = assert_reprocessing_explained_by_kills(events, kills)
    print(f"{reprocessed} reprocessings, all explained by the kills")
    with _db(tmp_path / "var" / "log.db") as conn:
        dead = conn.execute(
            "SELECT count(*) FROM messages m JOIN topics t ON t.id = m.topic_id "
            "WHERE t.name = 'dead-letters'"
        ).fetchone()[0]
    assert dead == 0


