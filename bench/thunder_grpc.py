"""CPU of one thunder gRPC call, and on which threads it is spent.

    .venv/bin/python bench/thunder_grpc.py [--posts 200000] [--authors 20000]
        [--following 1000] [--calls 1000]

A store of `--posts` posts; a server and a client in this process (one event loop), calls
made one at a time for viewers following `--following` authors (800 posts per answer).
Printed: process CPU per call, each thread's share (from /proc: the event loop thread
runs both sides; grpc's own threads poll), and the same queries in process, so the
difference is what gRPC adds. Run two versions side by side (PYTHONPATH=<old>/src) to
compare them over one period.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time

from grebe.thunder.client import GrpcThunderClient
from grebe.thunder.events import PostCreate
from grebe.thunder.proto import thunder_pb2
from grebe.thunder.service import ThunderServer
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import InNetworkQuery, ThunderStore


def thread_cpu() -> dict[tuple[str, str], float]:
    """CPU seconds so far of each thread of this process, by (tid, name)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[(tid, name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


async def run(args: argparse.Namespace) -> None:
    rng = random.Random(5)
    now = time.time()
    settings = ThunderSettings(port=0)
    store = ThunderStore(settings)
    for i in range(args.posts):
        store.apply(PostCreate(post_id=f"p{i}", author_id=f"u{rng.randrange(args.authors)}",
                               created_at=now - 40 * 3600 * (1 - i / args.posts)))
    viewers = [[f"u{rng.randrange(args.authors)}" for _ in range(args.following)]
               for _ in range(50)]
    server = ThunderServer(store, settings)
    port = await server.start()
    client = GrpcThunderClient(f"127.0.0.1:{port}", timeout_s=5, compression="none")
    await client.start()
    requests = [thunder_pb2.GetInNetworkPostsRequest(
        user_id="viewer", following_user_ids=viewers[q % len(viewers)])
        for q in range(args.calls)]
    for request in requests[:20]:  # warm up
        await client.call(request)
    before, c0, t0 = thread_cpu(), time.process_time(), time.thread_time()
    for request in requests:
        response = await client.call(request)
    process, loop = time.process_time() - c0, time.thread_time() - t0
    after = thread_cpu()
    c0 = time.thread_time()
    for q in range(args.calls):
        store.get_in_network_posts(InNetworkQuery(
            user_id="viewer", following_user_ids=viewers[q % len(viewers)]))
    local = time.thread_time() - c0
    await client.stop()
    await server.stop(0)
    n = args.calls
    print(f"{n} calls, {len(response.posts)} posts each; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"  gRPC call: process CPU {process / n * 1e3:.2f} ms, event-loop thread "
          f"{loop / n * 1e3:.2f} ms; the query in process {local / n * 1e3:.2f} ms")
    for (tid, name), seconds in sorted(after.items()):
        spent = seconds - before.get((tid, name), 0.0)
        if spent > 0:
            print(f"  thread {tid} {name:14s} {spent / n * 1e3:.3f} ms per call")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--posts", type=int, default=200_000)
    parser.add_argument("--authors", type=int, default=20_000)
    parser.add_argument("--following", type=int, default=1_000)
    parser.add_argument("--calls", type=int, default=1_000)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
