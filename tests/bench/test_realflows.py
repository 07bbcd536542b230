"""bench/realflows.py cleans up after itself: every run's data directory (a log, a store
and the posts, ~16 MB at 600 posts) is removed when the run ends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_startup_run_leaves_no_data_directory(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "realflows.py"), "--startup-only", "1",
         "--no-bytecode", "--flows", "spam_comment"],
        env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "first annotation" in done.stdout  # the run happened and found its annotation
    assert [p.name for p in scratch.iterdir() if p.name.startswith("grebe-")] == []
