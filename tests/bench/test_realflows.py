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


def test_peak_rss_survives_the_process_exit() -> None:
    """The watcher kept the last sample: a process read after its exit, before it was
    reaped (a zombie), has no memory figures, and the dispatcher's peak read 0.0 MB."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import realflows
    finally:
        sys.path.remove(str(ROOT / "bench"))
    child = subprocess.Popen([sys.executable, "-c",
                              "import sys; b = bytearray(64 << 20); sys.stdout.write('x'); "
                              "sys.stdout.flush(); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    watch = realflows.ProcessWatch(child.pid)
    try:
        assert child.stdout is not None and child.stdout.read(1) == b"x"
        watch._sample(child.pid, "dispatcher")  # one sample while it holds 64 MB
        child.stdin.close()  # type: ignore[union-attr]
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
        watch._sample(child.pid, "dispatcher")
    finally:
        watch.stop()
        child.wait()
    assert watch.peak_kb[child.pid] >= 64 << 10


def test_bytes_on_disk_count_each_database_and_its_wal_but_not_the_wal_index(
    tmp_path: Path,
) -> None:
    """The WAL index (`-shm`) is a fixed scratch file, not data: counted, it read as ~55
    bytes a post over 600 posts."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import realflows
    finally:
        sys.path.remove(str(ROOT / "bench"))
    for name, size in (("annotations.db", 8192), ("annotations.db-wal", 1000),
                       ("annotations.db-shm", 32768), ("posts.db", 4096)):
        (tmp_path / name).write_bytes(b"\0" * size)
    files = sorted(f.name for f in realflows.data_files(tmp_path))
    assert files == ["annotations.db", "annotations.db-wal", "posts.db"]
    assert realflows.disk_split(tmp_path, 1)["annotations"] == 9192
