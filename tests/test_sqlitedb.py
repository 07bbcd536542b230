"""Many processes opening one new SQLite file at the same moment (engines starting
together) must all get a WAL connection, not "database is locked"."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

from grebe.sqlitedb import connect

OPENERS = 8


def _open(path: str, barrier: Any, errors: Any) -> None:
    barrier.wait()
    try:
        conn = connect(Path(path), busy_timeout_s=10)
        conn.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
        conn.execute("INSERT INTO t VALUES (1)")
        conn.close()
    except sqlite3.Error as exc:
        errors.put(repr(exc))


def test_concurrent_first_opens_all_succeed_in_wal_mode(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    for round_ in range(5):
        path = tmp_path / f"race-{round_}.db"
        barrier, errors = ctx.Barrier(OPENERS), ctx.Queue()
        procs = [ctx.Process(target=_open, args=(str(path), barrier, errors))
                 for _ in range(OPENERS)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(30)
        assert all(proc.exitcode == 0 for proc in procs)
        assert errors.empty(), errors.get()
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == OPENERS
