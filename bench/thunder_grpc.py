"""One thunder gRPC call, split: server CPU, client CPU and wall clock, p50 and p99.

    .venv/bin/python bench/thunder_grpc.py [--posts 1000000] [--authors 100000]
        [--following 1000] [--calls 600] [--compare before=/tmp/main/src]

Each server runs in its own process (`--serve`, started by this script) over the
store of bench/thunder.py (1M posts of 100k authors, the same seed); the client is
this process and calls one at a time for viewers following `--following` authors (800
posts per answer), as a real client would: the response is parsed in full by grpc's
deserializer and then turned into `LightPost` records (`GrpcThunderClient`). Per call:
  * server CPU: the server process's CPU clock (clock_gettime on its pid; ns
    resolution, every thread of it), read before each call: one call's window runs up
    to the next call to it, so work the server does after answering is counted too;
  * client CPU: this process's CPU over the call (grpc's threads included), and the
    same plus turning the answer into records;
  * wall: the call, as the caller waits for it.
With `--compare NAME=SRC`, another server runs from another checkout's sources (e.g. a
`git archive` of main) and calls alternate between the servers, so all see the same load;
its records are made by that checkout's own `from_proto`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grebe
from grebe.thunder.client import GrpcThunderClient, from_proto
from grebe.thunder.proto import thunder_pb2
from grebe.thunder.service import ThunderServer
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import ThunderStore
from thunder import events  # bench/thunder.py: the same posts

HERE = Path(__file__).resolve().parent


def cpu_clock(pid: int) -> int:
    """The clock id of process `pid`'s CPU time (glibc's clock_getcpuclockid)."""
    return ((~pid) << 3) | 2  # CPUCLOCK_SCHED, process-wide


def viewers(args: argparse.Namespace) -> list[list[str]]:
    rng = random.Random(11)  # as bench/thunder.py
    return [[f"u{rng.randrange(args.authors)}" for _ in range(args.following)]
            for _ in range(50)]


async def serve(args: argparse.Namespace) -> None:
    """Fill a store, serve it, print the port, stop when stdin closes."""
    settings = ThunderSettings(port=0)
    store = ThunderStore(settings)
    for chunk in events(args.posts, args.authors):
        store.apply_many(chunk)
    gc.collect()
    gc.freeze()  # as `grebe thunder serve` does once caught up
    server = ThunderServer(store, settings)
    port = await server.start()
    print(f"serving {len(store):,} posts from {Path(grebe.__file__).parent}", file=sys.stderr)
    print(port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await server.stop(0)


def side_from_proto(name: str, src: str | None) -> Callable[[Any], Any]:
    """That side's `from_proto` (its client.py loaded under another name), so the
    records column compares the clients too."""
    if src is None:
        return from_proto
    spec = importlib.util.spec_from_file_location(
        f"client_{name}", Path(src) / "grebe" / "thunder" / "client.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.from_proto  # type: ignore[no-any-return]


def start_server(args: argparse.Namespace, src: str | None) -> tuple[subprocess.Popen[str], int]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--posts", str(args.posts),
         "--authors", str(args.authors)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=HERE)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


class Samples:
    def __init__(self) -> None:
        self.wall: list[float] = []
        self.server: list[float] = []
        self.client: list[float] = []
        self.records: list[float] = []  # client CPU including the LightPost records
        self.last = 0.0  # the server's CPU clock when the previous call began


async def run(args: argparse.Namespace) -> None:
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    sides: dict[str, str | None] = {name: src for name, src in map(split, args.compare)}
    sides["now"] = None
    servers = {name: start_server(args, src) for name, src in sides.items()}
    clients = {}
    for name, (_, port) in servers.items():
        clients[name] = GrpcThunderClient(f"127.0.0.1:{port}", timeout_s=5,
                                          compression="none")
        await clients[name].start()
    to_records = {name: side_from_proto(name, src) for name, src in sides.items()}
    following = viewers(args)
    samples = {name: Samples() for name in sides}
    posts = 0
    for q in range(args.warmup + args.calls + 1):  # the last call closes a window
        for name, client in clients.items():
            proc, s = servers[name][0], samples[name]
            request = thunder_pb2.GetInNetworkPostsRequest(
                user_id="viewer", following_user_ids=following[q % len(following)])
            s0 = time.clock_gettime(cpu_clock(proc.pid))
            if q > args.warmup:  # the server's CPU since the previous call began
                s.server.append(s0 - s.last)
            s.last = s0
            t0, c0 = time.perf_counter(), time.process_time()
            response = await client.call(request)
            t1, c1 = time.perf_counter(), time.process_time()
            records = list(map(to_records[name], response.posts))  # what the feed gets
            c2 = time.process_time()
            if args.warmup <= q < args.warmup + args.calls:
                s.wall.append(t1 - t0)
                s.client.append(c1 - c0)
                s.records.append(c2 - c0)
                posts = len(records)
    for client in clients.values():
        await client.stop()
    for proc, _ in servers.values():
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    print(f"{args.calls} calls per server (alternating), {posts} posts per answer, "
          f"following {args.following}; load average at end {os.getloadavg()[0]:.2f}")
    print(f"  {'ms':8s} {'wall p50':>9s} {'p99':>6s} | {'server CPU p50':>14s} {'p99':>6s} | "
          f"{'client CPU p50':>14s} {'p99':>6s} | {'+records p50':>12s} {'p99':>6s}")
    for name, s in samples.items():
        row = [v for xs in (s.wall, s.server, s.client, s.records)
               for v in (pct(xs, 50), pct(xs, 99))]
        print(f"  {name:8s} {row[0]:9.2f} {row[1]:6.2f} | {row[2]:14.2f} {row[3]:6.2f} | "
              f"{row[4]:14.2f} {row[5]:6.2f} | {row[6]:12.2f} {row[7]:6.2f}")


def split(spec: str) -> tuple[str, str]:
    name, _, src = spec.partition("=")
    if not src:
        raise SystemExit(f"--compare wants NAME=SRC, got {spec!r}")
    return name, src


def pct(values: list[float], q: int) -> float:
    """The q-th percentile, in ms."""
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--posts", type=int, default=1_000_000)
    parser.add_argument("--authors", type=int, default=100_000)
    parser.add_argument("--following", type=int, default=1_000)
    parser.add_argument("--calls", type=int, default=600)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--compare", action="append", default=[], metavar="NAME=SRC",
                        help="also serve from this src directory (e.g. before=/tmp/main/src)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    asyncio.run(serve(args) if args.serve else run(args))


if __name__ == "__main__":
    main()
