"""Home requests over HTTP, as `feed-serve` answers them: server processes apart from the
load generator, CPU per request read from /proc.

    .venv/bin/python bench/feed_http.py [--rate 200] [--seconds 10] [--workers 1]
        [--http h11|httptools] [--path home|healthz] [--posts 30000] [--authors 3000]
        [--viewers 200] [--max-in-flight 4]

Each server process builds bench/feed.py's world (the same seed, so the same posts,
viewers and embeddings; ~1,500 candidates a request), tunes the GC as `feed-serve`
does, and serves `grebe.feed.http.build_feed_app` on feed-serve's event loop
(`grebe.feed.runner.run_loop`) through `grebe.security.server`'s uvicorn config (the
guards, the header timeout) with the given HTTP parser. With
`--workers N`, N such processes share one listening port (SO_REUSEPORT: the kernel
spreads connections); each holds its own copy of the world, and what a viewer was
served and what their interest searches found are shared between them as
`feed-serve` with `feed.http_workers` shares them (grebe.feed.replication: each page
and neighbourhood sent to the other workers on a Unix connection).

The load generator (this process) sends `GET /home/v{n}` open-loop at `--rate` with a
hand-written HTTP/1.1 client, so its own CPU stays small. Each viewer has its own
keep-alive connection (up to MAX_CONNECTIONS), as an app holds one (a request's
latency includes any wait for the viewer's previous request on it): the kernel hashes
connections to workers, and with one per viewer each worker's share of the requests is
its share of 200 hashed connections (the larger share 52% at the median, 56% at the
90th percentile). A shared pool of 64 connections, as before, split the requests by the
hash of 64 (54.7% / 60.9%; 62 / 38% in one run), an artefact of the bench: a worker
with the larger share queued while the other idled (docs/benchmarks.md, "A cheaper
first request").
`--path healthz` asks `/healthz` instead: the cost of the HTTP layer and middleware
alone. Printed: answers by status, latency p50/p99 of the 200s, the servers' CPU per
answered request (from /proc, start to end of the timed window) and each worker's,
the load generator's own CPU per request, load average.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from procstat import sample

BENCH = Path(__file__).resolve().parent
#: Connections the load generator opens at most (feed-serve answers 503 past
#: `http.max_connections`, 256, a worker).
MAX_CONNECTIONS = 200


async def serve(args: argparse.Namespace) -> None:
    """One server process: the bench world behind feed-serve's app, on the shared port."""
    import numpy as np
    import uvicorn

    from feed import FEED, load_posts
    from grebe.core.engine_process import tune_gc
    from grebe.feed.blas import use_one_thread
    from grebe.feed.home import build_home_pipeline
    from grebe.feed.http import build_feed_app
    from grebe.feed.runner import WorkerSeat
    from grebe.feed.viewers import MemoryViewerDirectory, Viewer
    from grebe.security.server import uvicorn_config
    from grebe.stores.sqlite import SqliteStore
    from grebe.thunder.settings import ThunderSettings
    from grebe.thunder.store import ThunderStore

    rng, prng = np.random.default_rng(3), random.Random(3)
    thunder = ThunderStore(ThunderSettings(max_originals_per_author=64,
                                           serve_originals_per_author=5,
                                           serve_secondary_per_author=3))
    centres = rng.normal(size=(20, 384)).astype(np.float32)
    settings = FEED.model_copy(update={"max_concurrent_requests": args.max_in_flight})
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "annotations.db")
        await store.start()
        viewers = MemoryViewerDirectory()
        seat = WorkerSeat(args.index, args.workers, args.port, Path(args.sockets))
        shared = seat.replicated(viewers)  # as feed-serve's workers share served posts
        await shared.start()
        feed = build_home_pipeline(settings, store, thunder, None, viewers=shared, dim=384)
        shared.share_searches(feed.similar)  # and their interest searches
        await load_posts(feed, thunder, posts=args.posts, authors=args.authors,
                         centres=centres, now=time.time(), rng=rng, prng=prng)
        for n in range(args.viewers):
            viewers.viewers[f"v{n}"] = Viewer(
                user_id=f"v{n}",
                following=[f"u{prng.randrange(args.authors)}" for _ in range(400)],
                engaged=[f"p{prng.randrange(args.posts)}" for _ in range(5)])
        await feed.start()
        assert feed.features is not None
        await feed.features.get_many([f"p{i}" for i in range(args.posts)])
        tune_gc()
        use_one_thread()  # as feed-serve does (grebe.feed.blas)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", args.port))
        sock.listen(1024)  # connections wait in the backlog until uvicorn serves
        config = uvicorn_config(build_feed_app(feed), settings.http, log_level="warning",
                                http_parser=args.http)
        server = uvicorn.Server(config)
        print("ready", flush=True)
        await server.serve(sockets=[sock])
        await feed.aclose()
        await store.stop()
        await shared.stop()


class Connection:
    """One keep-alive HTTP/1.1 connection: a GET, then the status and body read by
    Content-Length (what feed-serve sends), nothing more."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def get(self, path: str) -> int:
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        await self.reader.readexactly(length)
        return status


async def load(args: argparse.Namespace, pids: list[int]) -> None:
    # One connection per viewer (up to MAX_CONNECTIONS, then shared by viewers n apart),
    # each in a queue of one: a viewer's next request waits for its previous one, as on
    # one HTTP/1.1 connection.
    idle: list[asyncio.Queue[Connection]] = []
    for _ in range(min(args.viewers, MAX_CONNECTIONS)):
        idle.append(asyncio.Queue())
        idle[-1].put_nowait(Connection(*await asyncio.open_connection("127.0.0.1",
                                                                        args.port)))
    path = "/healthz" if args.path == "healthz" else None
    statuses: dict[int, int] = {}
    latencies: list[float] = []
    returning: list[float] = []  # requests of viewers already served once this run

    async def one(n: int, scheduled: float) -> None:
        viewer = n % args.viewers
        held = idle[viewer % len(idle)]
        conn = await held.get()
        try:
            status = await conn.get(path or f"/home/v{viewer}")
        finally:
            held.put_nowait(conn)
        statuses[status] = statuses.get(status, 0) + 1
        if status == 200:
            latencies.append(time.perf_counter() - scheduled)
            if n >= args.viewers:
                returning.append(latencies[-1])

    for n in range(20):  # warm up: every worker's first requests
        await one(n, time.perf_counter())
    statuses.clear()
    latencies.clear()
    returning.clear()
    before = [sample(pid) for pid in pids]
    own = time.process_time()
    total = int(args.rate * args.seconds)
    start = time.perf_counter()
    tasks = []
    for n in range(total):
        scheduled = start + n / args.rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(n, scheduled)))
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - start
    own = time.process_time() - own
    after = [sample(pid) for pid in pids]
    each = [a.cpu_s - b.cpu_s for a, b in zip(after, before, strict=True)
            if a is not None and b is not None]
    cpu = sum(each)
    ok = statuses.get(200, 0)
    ordered = sorted(latencies) or [0.0]

    def pct(q: float, ordered: list[float] = ordered) -> float:
        return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))] * 1e3

    again = sorted(returning) or [0.0]

    print(f"{total} requests for /{args.path} at {args.rate}/s offered, {args.workers} "
          f"worker(s), {args.http}: answers {dict(sorted(statuses.items()))} "
          f"({ok / wall:.0f}/s answered 200) in {wall:.1f} s; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"  latency of the 200s p50 {pct(50):.1f} ms  p99 {pct(99):.1f} ms  "
          f"(median {statistics.median(ordered) * 1e3:.1f}); returning viewers "
          f"({len(again)}: each viewer's first request left out, the one that searches its "
          f"interests) p50 {pct(50, again):.1f} ms  p99 {pct(99, again):.1f} ms")
    print(f"  server CPU {cpu:.2f} s: {cpu / max(1, sum(statuses.values())) * 1e3:.2f} ms per "
          f"answer, {cpu / max(1, ok) * 1e3:.2f} ms per 200 (refusals included); "
          f"by worker {', '.join(f'{c:.2f}' for c in each)} s")
    print(f"  load generator CPU {own:.2f} s: {own / total * 1e3:.2f} ms per request")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--http", choices=["h11", "httptools"], default="httptools")
    parser.add_argument("--path", choices=["home", "healthz"], default="home")
    parser.add_argument("--posts", type=int, default=30_000)
    parser.add_argument("--authors", type=int, default=3_000)
    parser.add_argument("--viewers", type=int, default=200)
    parser.add_argument("--max-in-flight", type=int, default=4,
                        help="feed.max_concurrent_requests of each worker")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sockets", default="", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        from grebe.feed.runner import run_loop

        run_loop(serve(args))  # feed-serve's event loop (uvloop when installed)
        return
    if not args.port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            args.port = s.getsockname()[1]
    command = [sys.executable, str(Path(__file__).resolve()), "--serve", *sys.argv[1:],
               "--port", str(args.port)]
    sockets = tempfile.mkdtemp(prefix="feed-http-")  # the workers' served-page sockets
    workers = [subprocess.Popen([*command, "--sockets", sockets, "--index", str(i)],
                                stdout=subprocess.PIPE, text=True, cwd=BENCH)
               for i in range(args.workers)]
    try:
        for worker in workers:
            assert worker.stdout is not None
            if worker.stdout.readline().strip() != "ready":
                raise SystemExit("a server process did not start")
        asyncio.run(load(args, [w.pid for w in workers]))
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=30)
        shutil.rmtree(sockets, ignore_errors=True)


if __name__ == "__main__":
    main()
