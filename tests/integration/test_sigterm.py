"""SIGTERM on the real `grebe run`: drain within the window, exit, lose nothing."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

GREBE = str(Path(sys.executable).with_name("grebe"))
POSTS = 5000

SLOW_PLANS = textwrap.dedent(
    """
    import asyncio
    from grebe.core.bundle import PlanBundle
    from grebe.core.plan import Plan

    async def stuck(ctx):
        await asyncio.sleep(600)

    def build_bundle(config):
        return PlanBundle(plans=[Plan("stuck", {"stuck": stuck}, eligibility="basic",
                                      task_timeout_s=3600)])
    """
)


def _setup(tmp_path: Path, posts: int, **overrides: object) -> Path:
    settings: dict[str, object] = {
        "data_dir": str(tmp_path / "var"),
        "streams": [{"name": "posts", "eligibilities": ["basic"]}],
        "engine": {"processes": 2, "drain_window_s": 10},
        "metrics": {"enabled": False},
        "dispatcher": {"max_in_flight": 512, "poll_batch": 128},
    }
    settings.update(overrides)
    config = tmp_path / "grebe.yaml"
    config.write_text(json.dumps(settings))
    lines = tmp_path / "posts.jsonl"
    lines.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "author_id": "a", "text": f"hello {i}"}) + "\n"
            for i in range(posts)
        )
    )
    subprocess.run([GREBE, "ingest", str(lines), "-c", str(config)], check=True,
                   capture_output=True, timeout=60)
    return config


def _start(config: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [GREBE, "run", "-c", str(config), *args], start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )


def _wait_running(proc: subprocess.Popen) -> None:
    """Read the log until the runtime reports it is running."""
    assert proc.stderr is not None
    for line in proc.stderr:
        if "running:" in line:
            return
    raise AssertionError(f"grebe run exited early with {proc.wait()}")


def _rows(path: Path, sql: str) -> list[tuple]:
    if not path.exists():
        return []
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30) as conn:
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.OperationalError:
            return []


def _annotated(tmp_path: Path) -> set[str]:
    return {r[0] for r in _rows(tmp_path / "var" / "annotations.db",
                                "SELECT post_id FROM annotations")}


def _committed_ids(tmp_path: Path) -> list[str]:
    rows = _rows(
        tmp_path / "var" / "log.db",
        "SELECT m.value FROM messages m JOIN topics t ON t.id = m.topic_id "
        "JOIN group_offsets g ON g.topic_id = m.topic_id AND g.part = m.part "
        "WHERE t.name = 'posts' AND g.grp = 'grebe' AND m.msg_offset < g.next_offset",
    )
    return [json.loads(value)["id"] for (value,) in rows]


def test_sigterm_under_load_drains_and_loses_nothing(tmp_path):
    config = _setup(tmp_path, POSTS)
    proc = _start(config)
    _wait_running(proc)
    deadline = time.monotonic() + 60
    while not _annotated(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.01)
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    assert proc.returncode == 0, stderr
    assert took < 10, f"took {took:.1f}s to drain and exit"
    annotated = _annotated(tmp_path)
    committed = _committed_ids(tmp_path)
    assert 0 < len(committed) < POSTS, "SIGTERM should land mid-stream"
    assert set(committed) <= annotated, "acked posts must have their annotation"

    final = _start(config, "--exit-when-done")
    _, stderr = final.communicate(timeout=120)
    assert final.returncode == 0, stderr
    assert _annotated(tmp_path) == {f"p{i}" for i in range(POSTS)}
    assert len(_committed_ids(tmp_path)) == POSTS


def test_drain_window_bounds_the_exit_and_nothing_unfinished_is_acked(tmp_path):
    (tmp_path / "slow_plans.py").write_text(SLOW_PLANS)
    config = _setup(
        tmp_path, 50, plans={"factory": "slow_plans:build_bundle"},
        engine={"processes": 1, "drain_window_s": 1.0},
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = _start(config, env=env)
    _wait_running(proc)
    time.sleep(0.5)  # every post is now stuck in an engine
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    assert proc.returncode == 3, stderr  # EXIT_NOT_DRAINED
    assert 1.0 <= took < 6, f"took {took:.1f}s for a 1s drain window"
    assert _committed_ids(tmp_path) == []


def test_second_signal_forces_exit(tmp_path):
    (tmp_path / "slow_plans.py").write_text(SLOW_PLANS)
    config = _setup(
        tmp_path, 10, plans={"factory": "slow_plans:build_bundle"},
        engine={"processes": 1, "drain_window_s": 60},
    )
    proc = _start(config, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    _wait_running(proc)
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGTERM)
    time.sleep(0.3)
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    proc.communicate(timeout=10)
    assert proc.returncode == 130
    assert time.monotonic() - sent < 2
    assert _committed_ids(tmp_path) == []
