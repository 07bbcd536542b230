"""Chaos rounds against the real `grebe run`: default flows, default settings, local broker.

Each round ingests a batch of real posts (the bundled demo messages, fresh ids) plus
one line that is JSON but not a post (its own fault: it must be dead-lettered with
`decode_error`), injects faults chosen at random while posts are in flight, recovers,
waits until the stream is caught up, and checks the delivery promise:

- lost: a committed post with neither an annotation nor a dead letter;
- dead-lettered for a system fault: any dead letter other than the bad line's
  (every other post is a good post: if it was dead-lettered, grebe gave up on it);
- duplicates: the same message dead-lettered twice, or the same (post, producer)
  annotated twice;
- stuck: posts not committed when the round's time ran out (reported, not "lost").

Faults (`--faults`, default all that apply):
  kill_engine          kill -9 an engine process mid-processing
  kill_engine_loading  kill -9 an engine, then its replacement while it loads models
  kill_dispatcher      kill -9 the whole `grebe run` group, restart it
  disk_full            fill the tmpfs holding the data dir (annotation store), then free it
  store_cut            (`--store postgres`) cut the TCP proxy in front of PostgreSQL
The local broker is an SQLite file in this process's reach, so there is no broker
connection to cut on the default settings; see docs/testing.md.

Needs root for the tmpfs mount (`disk_full`). Bounded: `--rounds` and `--max-seconds`.
Prints the figures and exits 1 when anything was lost, dead-lettered for a system
fault or duplicated.

    .venv/bin/python scripts/chaos.py --rounds 6 --posts 80 --seed 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import asyncpg
import yaml

from grebe import constants as C
from grebe.brokers.local_sql import unpack_value
from grebe.codec import decode_dead_letter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chaos_faults import TcpProxy, fill_disk, group_alive, kill_group, mount_tmpfs

GREBE = str(Path(sys.executable).with_name("grebe"))
POSTGRES_DSN = "postgresql://grebe:grebe@127.0.0.1:5432/grebe"  # scripts/services.sh's
TOPIC = "posts"  # the default config's unified_posts stream
BAD_LINE = '{"post": {"text": "no id or author: dead-lettered for its own fault"}}'
FAULTS = ("kill_engine", "kill_engine_loading", "kill_dispatcher", "disk_full", "store_cut")
TMPFS_MB = 64
FAULT_HOLD_S = 8.0  # how long a disk stays full or the store cut, at least...
FELT_TIMEOUT_S = 60.0  # ...and until grebe felt it, at most this long
FELT_MARKS = ("system fault", "restart failed")  # a pause for one; an engine that cannot start
PROGRESS_TIMEOUT_S = 180.0  # model loading on a busy box is slow


@dataclass
class Figures:
    rounds: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    posts: int = 0
    annotated: int = 0
    dead_own: int = 0
    bad_lines: int = 0
    readers: int = 1  # streams reading TOPIC: each dead-letters every bad line once
    lost: int = 0
    dead_system: int = 0
    duplicates: int = 0
    stuck: int = 0
    felt: Counter[str] = field(default_factory=Counter)  # outages grebe ran into
    exits: Counter[int] = field(default_factory=Counter)  # grebe run died on its own
    system_reasons: Counter[str] = field(default_factory=Counter)

    def failed(self) -> bool:
        return bool(self.lost or self.dead_system or self.duplicates or self.stuck
                    or self.dead_own != self.bad_lines * self.readers)

    def report(self) -> str:
        lines = [
            f"rounds {self.rounds}, faults {sum(self.faults.values())} "
            f"({', '.join(f'{k} {v}' for k, v in sorted(self.faults.items()))}; "
            f"outages felt: {', '.join(f'{k} {v}' for k, v in sorted(self.felt.items()))})",
            f"posts {self.posts}: annotated {self.annotated}, dead-lettered for their own "
            f"fault {self.dead_own} ({self.bad_lines} bad lines x {self.readers} streams "
            f"reading {TOPIC})",
            f"lost {self.lost}, dead-lettered for a system fault {self.dead_system}, "
            f"duplicates {self.duplicates}, stuck {self.stuck}",
        ]
        if self.exits:
            lines.append("grebe run exited on its own: " + ", ".join(
                f"{n} x exit {code}" for code, n in sorted(self.exits.items())))
        lines += [f"  system-fault dead letter: {n} x {why}"
                  for why, n in self.system_reasons.most_common(5)]
        return "\n".join(lines)


class Chaos:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.work = Path(args.workdir or f"/tmp/grebe-chaos-{uuid.uuid4().hex[:8]}")
        self.data = self.work / "data"  # on the tmpfs: the annotation store
        self.log_db = self.work / "log.db"  # off it: the broker keeps working
        self.config = self.work / "grebe.yaml"
        self.out = self.work / "grebe-run.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.proxy: TcpProxy | None = None
        self.table = f"chaos_{uuid.uuid4().hex[:8]}"
        self.bad_lines: set[bytes] = set()
        self.figures = Figures()
        self.messages = [json.loads(line) for line in resources.files("grebe").joinpath(
            "data/demo_messages.jsonl").read_text().splitlines()]

    # --- setup ------------------------------------------------------------------

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        self.work.mkdir(parents=True, exist_ok=True)
        self.data.mkdir(exist_ok=True)
        with contextlib.ExitStack() as stack:
            if "disk_full" in self.args.faults:
                stack.enter_context(mount_tmpfs(self.data, TMPFS_MB))
            if self.args.store == "postgres":
                self.proxy = stack.enter_context(TcpProxy("127.0.0.1", 5432))
            self._write_config()
            try:
                yield
            finally:
                self._stop()
                if self.args.store == "postgres":
                    self._drop_table()

    def _write_config(self) -> None:
        raw: dict[str, Any] = copy.deepcopy(yaml.safe_load(
            resources.files("grebe").joinpath("data/default.yaml").read_text()))
        raw["data_dir"] = str(self.data)
        # Grox's unified generator and grebe's unified_posts both read TOPIC, each with
        # its own consumer group: each dead-letters a bad line once.
        self.figures.readers = sum(1 for s in raw["streams"] if s.get("topic") == TOPIC)
        raw["local"] = {"path": str(self.log_db)}
        raw["metrics"] = {"enabled": False}  # a fixed port would collide with others
        if self.proxy is not None:
            raw["store"] = {"backend": "postgres", "postgres_table": self.table,
                            "postgres_dsn": POSTGRES_DSN.replace(
                                ":5432/", f":{self.proxy.port}/")}
        self.config.write_text(yaml.safe_dump(raw))

    # --- the process --------------------------------------------------------------

    def _start(self) -> None:
        with self.out.open("ab") as handle:
            self.proc = subprocess.Popen(
                [GREBE, "run", "-c", str(self.config)], stdout=handle, stderr=handle,
                start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def _stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                kill_group(self.proc.pid)
        self.proc = None

    def _ensure_running(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                print(f"  grebe run exited with {self.proc.returncode}; restarting")
                self.figures.exits[self.proc.returncode] += 1
            self._start()

    def _engines(self) -> list[int]:
        assert self.proc is not None
        return [pid for pid in group_alive(self.proc.pid) if pid != self.proc.pid]

    # --- rounds -------------------------------------------------------------------

    def run(self) -> Figures:
        deadline = time.monotonic() + self.args.max_seconds
        with self.running():
            self._start()
            for number in range(self.args.rounds):
                if time.monotonic() > deadline:
                    print("time is up")
                    break
                self.round(number, deadline)
        return self.figures

    def round(self, number: int, deadline: float) -> None:
        ids = self._ingest(number)
        faults = self.rng.sample(self.args.faults, k=min(len(self.args.faults),
                                                         self.rng.choice((1, 2))))
        print(f"round {number}: {len(ids)} posts, faults {faults}", flush=True)
        self._ensure_running()
        for fault in faults:
            self._wait_progress(ids)
            getattr(self, f"_fault_{fault}")()
            self.figures.faults[fault] += 1
            self._ensure_running()
        self._wait_caught_up(min(deadline, time.monotonic() + self.args.round_timeout))
        self.check(ids)
        self.figures.rounds += 1
        print("  " + self.figures.report().replace("\n", "\n  "), flush=True)

    def _ingest(self, number: int) -> list[str]:
        picked = self.rng.sample(self.messages, k=min(self.args.posts, len(self.messages)))
        ids = [f"r{number}-{i}-{m['id']}" for i, m in enumerate(picked)]
        lines = [json.dumps({"id": pid, "author_id": f"a{i % 7}", "text": m["text"]})
                 for i, (pid, m) in enumerate(zip(ids, picked, strict=True))]
        bad = BAD_LINE.replace("no id", f"round {number}: no id")
        lines.insert(self.rng.randrange(len(lines) + 1), bad)
        self.bad_lines.add(bad.encode())
        self.figures.bad_lines = len(self.bad_lines)
        path = self.work / f"round-{number}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        subprocess.run([GREBE, "ingest", str(path), "--topic", TOPIC, "--no-validate",
                        "-c", str(self.config)], check=True, capture_output=True, timeout=120)
        self.figures.posts += len(ids)
        return ids

    def _wait_progress(self, ids: list[str]) -> None:
        """Until one more of this round's posts is annotated (posts are being processed
        right now, so the next fault lands mid-stream), or all of them are."""
        until = time.monotonic() + PROGRESS_TIMEOUT_S
        wanted = set(ids)
        before = len(wanted & self._annotated())
        while before < len(wanted) and time.monotonic() < until:
            if len(wanted & self._annotated()) > before:
                return
            self._ensure_running()
            time.sleep(0.1)

    def _wait_caught_up(self, until: float) -> None:
        while time.monotonic() < until:
            self._ensure_running()
            end, committed = self._positions()
            if end and committed == end:
                return
            time.sleep(0.5)

    # --- faults -------------------------------------------------------------------

    def _fault_kill_engine(self) -> None:
        engines = self._engines()
        if engines:
            os.kill(self.rng.choice(engines), signal.SIGKILL)

    def _fault_kill_engine_loading(self) -> None:
        before = set(self._engines())
        for pid in before:
            os.kill(pid, signal.SIGKILL)
        until = time.monotonic() + 60
        while time.monotonic() < until:  # the supervisor's replacement appears...
            fresh = set(self._engines()) - before
            if fresh:
                time.sleep(self.rng.uniform(0.2, 1.5))  # ...and is loading its models
                for pid in fresh:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                return
            if self.proc is None or self.proc.poll() is not None:
                return
            time.sleep(0.05)

    def _fault_kill_dispatcher(self) -> None:
        assert self.proc is not None
        kill_group(self.proc.pid)
        self.proc.wait(30)
        self._start()

    def _fault_disk_full(self) -> None:
        with fill_disk(self.data):
            self._hold_until_felt("disk_full")

    def _fault_store_cut(self) -> None:
        if self.proxy is None:
            return
        with self.proxy.cut():
            self._hold_until_felt("store_cut")

    def _hold_until_felt(self, fault: str) -> None:
        """Keep an outage up at least FAULT_HOLD_S, and until grebe felt it (a write
        failed: a system-fault pause in its log, or a new dead letter), at most
        FELT_TIMEOUT_S. A full disk is not felt while SQLite reuses its WAL's space."""
        log_size = self.out.stat().st_size if self.out.exists() else 0
        dead = self._system_dead_count()
        started = time.monotonic()
        while time.monotonic() - started < FELT_TIMEOUT_S:
            felt = self._system_dead_count() > dead or any(
                mark in self._log_since(log_size) for mark in FELT_MARKS)
            if felt and time.monotonic() - started >= FAULT_HOLD_S:
                self.figures.felt[fault] += 1
                return
            self._ensure_running()
            time.sleep(0.2)

    def _system_dead_count(self) -> int:
        return sum(1 for record in self._dead_letters() if record.original not in self.bad_lines)

    def _log_since(self, offset: int) -> str:
        with self.out.open("rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace")

    # --- checks -------------------------------------------------------------------

    def check(self, ids: list[str]) -> None:
        posts = self._posts()
        committed = self._committed(posts)
        annotated_rows = self._annotation_rows()
        annotated = {post for post, _ in annotated_rows}
        dead = self._dead_letters()
        dead_ids = set()
        seen: Counter[tuple[str, int, int]] = Counter()
        own = system = 0
        for record in dead:
            seen[(record.source, record.partition, record.offset)] += 1
            if record.original in self.bad_lines and record.reason == C.DEAD_REASON_DECODE:
                own += 1
                continue
            system += 1
            self.figures.system_reasons[f"{record.reason}: {(record.last_error or '')[:90]}"] += 1
            with contextlib.suppress(ValueError, KeyError, TypeError):
                dead_ids.add(json.loads(record.original)["id"])
        self.figures.dead_own = own
        self.figures.dead_system = system
        self.figures.duplicates = (sum(n - 1 for n in seen.values())
                                   + sum(n - 1 for n in Counter(annotated_rows).values()))
        good = {post for post in committed if post is not None}
        self.figures.lost = len(good - annotated - dead_ids)
        self.figures.annotated = len(annotated)
        self.figures.stuck = sum(1 for post in posts.values() if post not in committed)

    def _positions(self) -> tuple[int, int]:
        rows = self._log_query(
            "SELECT (SELECT count(*) FROM messages m WHERE m.topic_id = t.id), "
            "(SELECT coalesce(sum(g.next_offset), 0) FROM group_offsets g "
            " WHERE g.topic_id = t.id AND g.grp = ?) FROM topics t WHERE t.name = ?",
            (C.DEFAULT_CONSUMER_GROUP, TOPIC))
        return (rows[0][0], rows[0][1]) if rows else (0, 0)

    def _posts(self) -> dict[tuple[int, int], str | None]:
        """{(partition, offset): post id, None for the bad lines} of the topic."""
        posts: dict[tuple[int, int], str | None] = {}
        for part, offset, stored, kind in self._log_query(
            "SELECT m.part, m.msg_offset, m.value, m.codec FROM messages m JOIN topics t "
            "ON t.id = m.topic_id WHERE t.name = ?", (TOPIC,)):
            value = unpack_value(stored, kind)
            posts[(part, offset)] = None if value in self.bad_lines else json.loads(value)["id"]
        return posts

    def _committed(self, posts: dict[tuple[int, int], str | None]) -> set[str | None]:
        ends = dict(self._log_query(
            "SELECT g.part, g.next_offset FROM group_offsets g JOIN topics t "
            "ON t.id = g.topic_id WHERE t.name = ? AND g.grp = ?",
            (TOPIC, C.DEFAULT_CONSUMER_GROUP)))
        return {post for (part, offset), post in posts.items() if offset < ends.get(part, 0)}

    def _dead_letters(self) -> list[Any]:
        return [decode_dead_letter(unpack_value(value, kind)) for value, kind in self._log_query(
            "SELECT m.value, m.codec FROM messages m JOIN topics t ON t.id = m.topic_id "
            "WHERE t.name = ?", (C.DEFAULT_DEAD_LETTER_TOPIC,))]

    def _log_query(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        if not self.log_db.exists():
            return []
        with contextlib.closing(sqlite3.connect(f"file:{self.log_db}?mode=ro", uri=True,
                                                timeout=30)) as conn:
            try:
                return conn.execute(sql, params).fetchall()
            except sqlite3.OperationalError:
                return []

    def _annotated(self) -> set[str]:
        return {post for post, _ in self._annotation_rows()}

    def _annotation_rows(self) -> list[tuple[str, str]]:
        if self.args.store == "postgres":
            return self._pg_rows()
        path = self.data / C.DEFAULT_STORE_DB
        if not path.exists():
            return []
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True,
                                                timeout=30)) as conn:
            try:
                return conn.execute("SELECT post_id, producer FROM annotations").fetchall()
            except sqlite3.OperationalError:
                return []

    def _pg_rows(self) -> list[tuple[str, str]]:
        async def fetch() -> list[tuple[str, str]]:
            conn = await asyncpg.connect(POSTGRES_DSN)
            try:
                if await conn.fetchval("SELECT to_regclass($1)", self.table) is None:
                    return []
                rows = await conn.fetch(f"SELECT post_id, producer FROM {self.table}")
                return [(r[0], r[1]) for r in rows]
            finally:
                await conn.close()

        return asyncio.run(fetch())

    def _drop_table(self) -> None:
        async def drop() -> None:
            conn = await asyncpg.connect(POSTGRES_DSN)
            try:
                await conn.execute(f"DROP TABLE IF EXISTS {self.table}")
            finally:
                await conn.close()

        asyncio.run(drop())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--posts", type=int, default=80, help="good posts per round")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-seconds", type=float, default=1200)
    parser.add_argument("--round-timeout", type=float, default=300,
                        help="seconds a round may take to catch up after its faults")
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--faults", nargs="+", choices=FAULTS, default=None)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args(argv)
    if args.faults is None:
        args.faults = [f for f in FAULTS if f != "store_cut" or args.store == "postgres"]
    if "store_cut" in args.faults and args.store != "postgres":
        parser.error("store_cut needs --store postgres")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    chaos = Chaos(args)
    print(f"chaos: work dir {chaos.work}, seed {args.seed}, faults {args.faults}")
    figures = chaos.run()
    print("\n== chaos figures ==\n" + figures.report())
    return 1 if figures.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
