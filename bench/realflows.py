"""Real flows on real posts, beside the model limit, in one run.

    .venv/bin/python bench/realflows.py [--posts N] [--engines K] [--flows a,b,...]

Ordinary real tweets (bench/data/tweets.jsonl, see its NOTICE) go through the six default
text flows (spam_comment, post_safety, safety_ptos, banger_initial_screen,
post_embedding_with_summary, mm_emb_v5) exactly as a user runs them: `grebe ingest` into
the local broker, then `grebe run --exit-when-done` with engine processes and the SQLite
store. It prints:

- posts/s end to end and in steady state (first to last annotation);
- CPU ms per post in all, and split by process (dispatcher, each engine), from /proc;
  and net of start-up: the extra CPU of N posts over STARTUP_POSTS (8) posts, per extra
  post (an engine start costs seconds of CPU: imports and model loading, which N posts
  amortise; and each engine's first post loads the models it builds lazily: 8 posts,
  spread over every engine, pay that in each, where one post paid it in one engine only
  and put the other engine's share into the per-post figure);
- seconds from start to the first annotation;
- peak RSS per process;
- p50/p99 ingest -> annotation latency with posts arriving at 50% and at 100% of the
  measured throughput (a second and third run, posts appended while grebe runs, once
  STARTUP_POSTS warm posts are annotated: every engine has started);
- bytes per post on disk (log + store), split by file and by topic of the log, and what
  the log holds once the output topic's retention has passed; and the cosine between
  each float32 embedding and what a reader decodes from the output topic;
- the model limit: the same posts through the same models in one process, each model
  once per post at its best batch shape (length-sorted batches of 64), with one BLAS
  thread as in an engine (before, two spinning OpenBLAS threads put ~0.5-0.9 ms a post
  into the limit that engines do not pay), and the ratio of grebe's CPU per post to it
  (1.0 would be no overhead at all).

CPU ms per post is the figure that holds on a busy machine; posts/s is not.

Bytecode: `pip install` compiles every module, and a checkout writes `__pycache__` on its
first import, so a user's `grebe run` reads .pyc files. Where PYTHONDONTWRITEBYTECODE is
set (as on the reference machine), every start compiled every module again (about half
of the dispatcher's start-up CPU), so the bench gives its `grebe` processes a pycache
(PYTHONPYCACHEPREFIX, under the bench's cache directory) and fills it with one unmeasured
warm-up run first. `--no-bytecode` measures the old way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import procstat
import yaml

import grebe.blas

ROOT = Path(__file__).resolve().parent.parent
TWEETS = ROOT / "bench" / "data" / "tweets.jsonl"
# The run "net of start-up" is measured against: enough posts that every engine gets
# some (the first 8 tweets' authors go 4 and 4 to two engines; least-loaded routing
# alternates), so each engine's first-post model loads are start-up, not per post.
STARTUP_POSTS = 8
GREBE = str(Path(sys.executable).parent / "grebe")
FLOWS = ["spam_comment", "post_safety", "safety_ptos", "banger_initial_screen",
         "post_embedding_with_summary", "mm_emb_v5"]
PYCACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "grebe-bench-pycache"
#: The environment of every `grebe` process the bench starts (see "Bytecode" above).
CHILD_ENV = dict(os.environ)


def use_bytecode() -> None:
    """Let the `grebe` processes read and write .pyc files, as an installed grebe does."""
    CHILD_ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    if sys.flags.dont_write_bytecode:  # this environment forbids __pycache__: keep them apart
        CHILD_ENV["PYTHONPYCACHEPREFIX"] = str(PYCACHE)


def write_config(data_dir: Path, flows: list[str], engines: int | None) -> Path:
    config: dict = {
        "data_dir": str(data_dir),
        "streams": [{"name": "bench", "topic": "posts", "eligibilities": flows}],
        "plans": {"factory": "grebe.flows.registry:build_bundle"},
        "metrics": {"enabled": False},
    }
    if engines is not None:
        config["engine"] = {"processes": engines}
    path = data_dir / "grebe.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A run's data directory (log, store, config, posts), removed when the run ends,
    failed or not: each run wrote ~16 MB under /tmp and left it there."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def posts_file(n: int, directory: Path, tag: str) -> Path:
    lines = TWEETS.read_text().splitlines()
    out = directory / f"posts-{tag}.jsonl"
    with out.open("w") as handle:
        for i in range(n):
            post = json.loads(lines[i % len(lines)])
            post["id"] = f"{tag}-{i}"
            handle.write(json.dumps(post) + "\n")
    return out


class ProcessWatch:
    """Samples CPU seconds and peak RSS of a process and its children from /proc, so each
    engine's figure survives its exit (the last sample before it)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu: dict[int, float] = {}
        self.peak_kb: dict[int, int] = {}
        self.names: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _children(self) -> list[int]:
        try:
            return [int(p) for p in Path(f"/proc/{self.pid}/task/{self.pid}/children")
                    .read_text().split()]
        except OSError:
            return []

    def _sample(self, pid: int, name: str) -> None:
        now = procstat.sample(pid)
        if now is None:
            return
        self.cpu[pid] = now.cpu_s
        # The max: a process that has exited but is not reaped yet (a zombie) still has
        # its stat, with no memory figures (read as 0).
        self.peak_kb[pid] = max(self.peak_kb.get(pid, 0), now.peak_kb)
        self.names.setdefault(pid, name)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample(self.pid, "dispatcher")
            for i, child in enumerate(self._children()):
                self._sample(child, f"engine {i}")
            self._stop.wait(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def annotation_times(data_dir: Path) -> dict[str, float]:
    """post id -> when its last annotation was written (empty before the store exists)."""
    path = data_dir / "annotations.db"
    if not path.exists():
        return {}
    try:
        with sqlite3.connect(path) as conn:
            return dict(conn.execute(
                "SELECT post_id, max(updated_at) FROM annotations GROUP BY post_id").fetchall())
    except sqlite3.OperationalError:  # the engines have not created the table yet
        return {}


def _size(path: Path) -> int:
    """A file's size, 0 once gone (SQLite removes its -shm/-wal files as it closes)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def data_files(data_dir: Path, pattern: str = "*.db*") -> list[Path]:
    """The SQLite files that hold data: each database and its WAL, not its `-shm`. The
    `-shm` is the WAL's index, a fixed 32 KB scratch file SQLite rebuilds from the WAL and
    deletes with the last connection; one left by a reader still closing read as ~55 bytes
    per post over 600 posts, a constant, not something each post costs."""
    return [f for f in data_dir.glob(pattern) if not f.name.endswith("-shm")]


def checkpoint(data_dir: Path) -> None:
    """Move each SQLite file's write-ahead log into the file before sizes are read: a WAL
    still on disk when `grebe run` exits (an engine closing its store a moment later)
    made the same data read 26 KB or 35 KB per post from run to run; the WAL is bounded
    (auto-checkpoint), what grows per post is the file."""
    for db in data_dir.glob("*.db"):
        with contextlib.closing(sqlite3.connect(db)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def disk_split(data_dir: Path, n: int) -> dict[str, float]:
    """Bytes per post by file (each SQLite file with its -wal/-shm), and the key + value
    bytes per post each topic of the local log holds: what the messages weigh beside
    what the file costs (pages, indexes, free space)."""
    split: dict[str, float] = {}
    for db in sorted(data_dir.glob("*.db")):
        split[db.stem] = sum(_size(f) for f in data_files(data_dir, db.name + "*")) / n
    log_db = data_dir / "log.db"
    if log_db.exists():
        with sqlite3.connect(log_db) as conn:
            for topic, size in conn.execute(
                    "SELECT t.name, sum(length(m.value) + coalesce(length(m.key), 0)) "
                    "FROM messages m JOIN topics t ON t.id = m.topic_id GROUP BY t.name"):
                split[f"log topic {topic}"] = size / n
    return split


def log_once_output_aged_out(data_dir: Path, n: int, topic: str = "annotations") -> float:
    """Bytes per post the log would hold once the output topic's retention has passed
    (it repeats the annotation store; `local.output_retention_s`): a copy of the log
    without that topic's messages, packed by VACUUM INTO. Plain SQL, so it measures a
    tree before that retention existed the same way."""
    log_db = data_dir / "log.db"
    if not log_db.exists():
        return 0.0
    with tempfile.TemporaryDirectory(prefix="grebe-logcopy-") as tmp:
        copy, packed = Path(tmp) / "log.db", Path(tmp) / "packed.db"
        shutil.copy(log_db, copy)
        with contextlib.closing(sqlite3.connect(copy)) as conn:
            conn.execute("DELETE FROM messages WHERE topic_id IN "
                         "(SELECT id FROM topics WHERE name = ?)", (topic,))
            conn.commit()
            conn.execute("VACUUM INTO ?", (str(packed),))
        return packed.stat().st_size / n


def ingest(config: Path, path: Path) -> None:
    subprocess.run([GREBE, "ingest", str(path), "-c", str(config)], check=True,
                   stdout=subprocess.DEVNULL, env=CHILD_ENV)


def throughput_run(n: int, flows: list[str], engines: int | None) -> dict:
    with scratch("grebe-realflows-") as data_dir:
        return _throughput_run(data_dir, n, flows, engines)


def _throughput_run(data_dir: Path, n: int, flows: list[str], engines: int | None) -> dict:
    config = write_config(data_dir, flows, engines)
    ingest(config, posts_file(n, data_dir, "t"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    proc = subprocess.Popen([GREBE, "run", "-c", str(config), "--exit-when-done"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=CHILD_ENV)
    watch = ProcessWatch(proc.pid)
    first = None
    try:
        while proc.poll() is None:
            if first is None and annotation_times(data_dir):
                first = time.time() - started
            time.sleep(0.05)
    finally:  # interrupted: stop grebe before its data directory goes
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    wall = time.time() - started
    watch.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"grebe run exited {proc.returncode}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    annotated = len(annotation_times(data_dir))
    checkpoint(data_dir)
    on_disk = sum(_size(f) for f in data_files(data_dir))
    return {
        "posts": n, "annotated": annotated, "wall_s": wall, "first_annotation_s": first,
        "end_to_end_posts_per_s": n / wall, "cpu_ms_per_post": 1000 * cpu / n,
        "cpu_ms_per_post_by_process": {
            watch.names[p]: 1000 * watch.cpu[p] / n for p in sorted(watch.cpu)},
        "peak_rss_mb_by_process": {
            watch.names[p]: watch.peak_kb[p] / 1024 for p in sorted(watch.peak_kb)},
        "bytes_per_post": on_disk / n, "bytes_per_post_split": disk_split(data_dir, n),
        "log_bytes_per_post_once_output_aged_out": log_once_output_aged_out(data_dir, n),
    }


def latency_run(n: int, rate: float, flows: list[str], engines: int | None) -> dict:
    """Posts appended at `rate` per second while grebe runs; latency = last annotation of
    a post minus the moment its batch was appended."""
    with scratch("grebe-latency-") as data_dir:
        return _latency_run(data_dir, n, rate, flows, engines)


def _latency_run(data_dir: Path, n: int, rate: float, flows: list[str],
                 engines: int | None) -> dict:
    config = write_config(data_dir, flows, engines)
    # Start-up is not latency: every engine's (STARTUP_POSTS reach them all).
    ingest(config, posts_file(STARTUP_POSTS, data_dir, "warm"))
    proc = subprocess.Popen([GREBE, "run", "-c", str(config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=CHILD_ENV)
    try:
        while len(annotation_times(data_dir)) < STARTUP_POSTS:
            time.sleep(0.1)
        sent: dict[str, float] = {}
        lines = posts_file(n, data_dir, "l").read_text().splitlines()
        batch = max(1, int(rate / 10))  # ten appends a second
        from grebe.brokers.factory import local_log
        from grebe.brokers.local import LocalProducer
        from grebe.config import load_config

        async def feed() -> None:
            producer = LocalProducer(local_log(load_config(config)))
            await producer.start()
            t0 = time.time()
            for i in range(0, n, batch):
                await asyncio.sleep(max(0.0, t0 + i / rate - time.time()))
                chunk = lines[i:i + batch]
                now = time.time()
                await producer.publish_many(
                    "posts", [(json.loads(line)["id"].encode(), line.encode()) for line in chunk])
                sent.update((json.loads(line)["id"], now) for line in chunk)
            await producer.stop()

        asyncio.run(feed())
        deadline = time.time() + 120 + n / rate
        while time.time() < deadline:
            done = annotation_times(data_dir)
            if all(pid in done for pid in sent):
                break
            time.sleep(0.2)
        latencies = np.array([done[p] - sent[p] for p in sent if p in done])
    finally:
        proc.terminate()
        proc.wait(60)
    return {"rate": rate, "posts": n, "finished": len(latencies),
            "p50_s": float(np.percentile(latencies, 50)),
            "p99_s": float(np.percentile(latencies, 99))}


def wire_cosine(vector: np.ndarray) -> float:
    """Cosine between a float32 embedding and what a consumer decodes from the output
    topic (codec.encode_annotation -> decode_annotation)."""
    from grebe import codec
    from grebe.types import Annotation

    if not hasattr(codec, "encode_annotation"):  # a tree before compact vectors (a
        return 1.0  # "before" run): the topic carried the floats themselves
    raw = codec.encode_annotation(Annotation(post_id="x", producer="p", version="1",
                                             embedding=vector.tolist()))
    decoded = np.asarray(codec.decode_annotation(raw).embedding, dtype=np.float64)
    original = vector.astype(np.float64)
    return float(decoded @ original / (np.linalg.norm(decoded) * np.linalg.norm(original)))


def model_limit(n: int) -> dict:
    """Each model the text flows call, once per post, at its best batch shape."""
    from grebe.config import load_config
    from grebe.flows.models import build_models
    from grebe.flows.settings import FlowSettings

    config = load_config(plans={"factory": "grebe.flows.registry:build_bundle"})
    settings = FlowSettings.from_section(config.plans)
    models = build_models(config, settings)
    texts = [json.loads(line)["text"] for line in TWEETS.read_text().splitlines()]
    texts = (texts * (n // len(texts) + 1))[:n]
    order = sorted(range(n), key=lambda i: len(texts[i]))
    batches = [[texts[i] for i in order[j:j + 64]] for j in range(0, n, 64)]

    wire: list[float] = []

    async def run() -> tuple[float, float]:
        for part in models.components():
            await part.start()
        grebe.blas.use_one_thread()  # as build_bundle does once the models are loaded
        try:
            await models.embedder.embed(batches[0])  # warm up outside the measure
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for batch in batches:
                vectors = await models.embedder.embed(batch)
                if models.heads is not None:  # what the flows call: every head, one pass
                    models.heads.predict(vectors, batch)
                else:  # the pre-heads models
                    if hasattr(models.spam_head, "ready"):  # loaded on first use
                        await models.spam_head.ready()
                    models.spam_head.score(vectors)
                    await models.offensive.classify(batch)
                    await models.hate.classify(batch)
                if models.language is not None:
                    await models.language.classify(batch)
            spent = time.process_time() - cpu0, time.perf_counter() - wall0
            for batch in batches:  # the output topic's precision, outside the measure
                for vector in np.asarray(await models.embedder.embed(batch), dtype=np.float32):
                    wire.append(wire_cosine(vector))
            return spent
        finally:
            for part in reversed(models.components()):
                await part.stop()

    cpu, wall = asyncio.run(run())
    called = [models.embedder, models.language,
              *([models.heads] if models.heads is not None
                else [models.spam_head, models.offensive, models.hate])]
    return {"cpu_ms_per_post": 1000 * cpu / n, "posts_per_s": n / wall,
            "wire_cosine_p50": float(np.percentile(wire, 50)), "wire_cosine_min": min(wire),
            "vectors": len(wire),
            "models": [type(p).__name__ for p in called if p is not None]}


def startup_only(runs: int, flows: list[str], engines: int | None) -> None:
    """`grebe run --exit-when-done` on one post, `runs` times: seconds from start to the
    first annotation, each beside the 1-minute load average (start-up time on a busy
    machine says little without it)."""
    for _ in range(runs):
        load = os.getloadavg()[0]
        row = throughput_run(1, flows, engines)
        split = ", ".join(f"{name} {ms / 1000:.2f}"
                          for name, ms in row["cpu_ms_per_post_by_process"].items())
        print(f"first annotation {row['first_annotation_s']:6.2f} s after start, "
              f"exit {row['wall_s']:6.2f} s, CPU {row['cpu_ms_per_post'] / 1000:.2f} s "
              f"({split}) (load average {load:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--posts", type=int, default=2000)
    parser.add_argument("--engines", type=int, default=None)
    parser.add_argument("--flows", default=",".join(FLOWS))
    parser.add_argument("--latency-posts", type=int, default=600)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--startup-only", type=int, default=0, metavar="RUNS",
                        help="only time start -> first annotation of one post, RUNS times")
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="keep N CPU-bound processes spinning meanwhile (a busy machine)")
    parser.add_argument("--no-bytecode", action="store_true",
                        help="as PYTHONDONTWRITEBYTECODE says: compile every module at start")
    args = parser.parse_args()
    flows = args.flows.split(",")
    if not args.no_bytecode:
        use_bytecode()
        throughput_run(1, flows, args.engines)  # warm-up: writes the .pyc files, unmeasured
    with spinning(args.busy):
        if args.startup_only:
            startup_only(args.startup_only, flows, args.engines)
            return
        measure(args, flows)


@contextlib.contextmanager
def spinning(n: int) -> Iterator[None]:
    """N processes burning CPU (the busy-machine start-up figure), stopped on exit."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(n)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def measure(args: argparse.Namespace, flows: list[str]) -> None:
    # A few posts: start-up, each engine's first post, first annotation and shutdown
    # with nothing else in the way.
    idle = throughput_run(STARTUP_POSTS, flows, args.engines)
    grebe = throughput_run(args.posts, flows, args.engines)
    # Throughput net of start and stop: the extra posts over the extra seconds.
    extra = max(args.posts - STARTUP_POSTS, 1)
    rate = extra / max(grebe["wall_s"] - idle["wall_s"], 1e-9)
    grebe["posts_per_s"] = rate
    # CPU net of start-up and shutdown: the extra posts over the extra CPU.
    grebe["startup_cpu_s"] = idle["cpu_ms_per_post"] * STARTUP_POSTS / 1000
    grebe["cpu_ms_per_post_net"] = (
        grebe["cpu_ms_per_post"] * args.posts - idle["cpu_ms_per_post"] * STARTUP_POSTS) / extra
    grebe["cpu_ms_per_post_net_by_process"] = {
        name: (ms * args.posts
               - idle["cpu_ms_per_post_by_process"].get(name, 0.0) * STARTUP_POSTS) / extra
        for name, ms in grebe["cpu_ms_per_post_by_process"].items()}
    grebe["first_annotation_s"] = idle["first_annotation_s"]
    limit = model_limit(args.posts)
    latency = [latency_run(args.latency_posts, rate * load, flows, args.engines)
               for load in (0.5, 1.0)]
    figures = {"grebe": grebe, "limit": limit, "latency": latency,
               "cpu_ratio_limit_over_grebe": limit["cpu_ms_per_post"] / grebe["cpu_ms_per_post"]}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{args.posts} real tweets, flows: {', '.join(flows)}")
    print(f"  throughput        {rate:8.1f} posts/s net of start/stop "
          f"({grebe['end_to_end_posts_per_s']:.1f} end to end); first annotation "
          f"{grebe['first_annotation_s']:.2f} s after start")
    print(f"  CPU per post      {grebe['cpu_ms_per_post']:8.2f} ms in all, "
          f"{grebe['cpu_ms_per_post_net']:.2f} ms net of start-up "
          f"({grebe['startup_cpu_s']:.2f} s CPU to start, run {STARTUP_POSTS} posts and stop)")
    for name, ms in grebe["cpu_ms_per_post_by_process"].items():
        rss = grebe["peak_rss_mb_by_process"].get(name, 0.0)
        net = grebe["cpu_ms_per_post_net_by_process"][name]
        print(f"    {name:<14}  {ms:8.2f} ms ({net:.2f} net)   peak RSS {rss:7.1f} MB")
    print(f"  on disk           {grebe['bytes_per_post']:8.0f} bytes per post (log + store)")
    for name, size in grebe["bytes_per_post_split"].items():
        print(f"    {name:<24}{size:8.0f} bytes per post")
    aged = grebe["log_bytes_per_post_once_output_aged_out"]
    steady = grebe["bytes_per_post"] - grebe["bytes_per_post_split"].get("log", 0.0) + aged
    print(f"  on disk once the output topic aged out {steady:8.0f} bytes per post "
          f"(log {aged:.0f})")
    print(f"  output topic vectors: cosine float32 -> wire p50 {limit['wire_cosine_p50']:.9f}"
          f" min {limit['wire_cosine_min']:.9f} ({limit['vectors']} vectors)")
    for row in latency:
        print(f"  latency @ {row['rate']:6.1f}/s  p50 {row['p50_s']:.3f} s  "
              f"p99 {row['p99_s']:.3f} s  ({row['finished']}/{row['posts']} posts)")
    print(f"model limit         {limit['cpu_ms_per_post']:8.2f} ms CPU per post, "
          f"{limit['posts_per_s']:.1f} posts/s in one process ({', '.join(limit['models'])})")
    print(f"ratio limit/grebe   {figures['cpu_ratio_limit_over_grebe']:8.2f} (CPU per post), "
          f"{limit['cpu_ms_per_post'] / grebe['cpu_ms_per_post_net']:.2f} net of start-up")


if __name__ == "__main__":
    main()
