"""Thunder benchmark: 1,000,000 posts from 100,000 authors; viewers following 1,000.

Prints, side by side in one run:
  * record layouts (tuple, __slots__ class, msgspec Struct gc=False): bytes and GC cost;
  * ingest events/s: store.apply of decoded events, and decode(JSON)+apply;
  * query p50/p99 (wall clock and CPU time): in process (also with a "seen" list of
    500 excluded ids, and of 10,000), and over gRPC on 127.0.0.1 (client and server share this
    process's event loop, calls made one at a time);
  * a baseline: the obvious store (per-author lists of tuples, a query gathers every post
    of the followed authors and sorts them) on the same data, and the ratios.

Run: .venv/bin/python bench/thunder.py [--posts 1000000 --authors 100000 --following 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import resource
import statistics
import time
import tracemalloc
from collections import defaultdict
from collections.abc import Iterator

import msgspec

from grebe.thunder.client import GrpcThunderClient
from grebe.thunder.events import PostCreate, decode_event, encode_event
from grebe.thunder.proto import thunder_pb2
from grebe.thunder.service import ThunderServer
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import InNetworkQuery, LightPost, ThunderStore

CHUNK = 100_000


def events(n: int, authors: int, seed: int = 7) -> Iterator[list[PostCreate]]:
    """Chunks of creates in stream order over the last ~40 hours: 70% originals, 15%
    replies, 10% retweets, 5% quotes; 5% carry a video; 1% arrive out of order."""
    rng = random.Random(seed)
    now = time.time()
    start = now - 40 * 3600
    step = (now - start) / n
    chunk: list[PostCreate] = []
    for i in range(n):
        author = f"u{rng.randrange(authors)}"
        created = start + i * step - (rng.random() * 60 if rng.random() < 0.01 else 0.0)
        kind = rng.random()
        extra: dict[str, object] = {}
        if i > 1000 and kind < 0.15:
            extra["in_reply_to_post_id"] = f"p{rng.randrange(i - 1000, i)}"
        elif i > 1000 and kind < 0.25:
            extra["retweet_of_post_id"] = f"p{rng.randrange(i - 1000, i)}"
        elif i > 1000 and kind < 0.30:
            extra["quote_of_post_id"] = f"p{rng.randrange(i - 1000, i)}"
        chunk.append(PostCreate(post_id=f"p{i}", author_id=author, created_at=created,
                                has_video=rng.random() < 0.05, **extra))  # type: ignore[arg-type]
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


# ---- record layouts --------------------------------------------------------------


class SlotsPost:
    __slots__ = ("author_id", "conversation_id", "created_at", "flags", "in_reply_to_post_id",
                 "post_id", "source_post_id")

    def __init__(self, post_id: str, author_id: str, created_at: float) -> None:
        self.post_id, self.author_id, self.created_at = post_id, author_id, created_at
        self.in_reply_to_post_id = self.conversation_id = self.source_post_id = None
        self.flags = 0


def layouts(n: int = 200_000) -> None:
    ids = [f"p{i}" for i in range(n)]
    makers = {
        "tuple": lambda i: (ids[i], "u1", float(i), None, None, None, None, None, None, None,
                            False, False),
        "__slots__ class": lambda i: SlotsPost(ids[i], "u1", float(i)),
        "msgspec Struct gc=False": lambda i: LightPost(post_id=ids[i], author_id="u1",
                                                       created_at=float(i)),
    }
    print(f"record layout ({n:,} records; bytes exclude the id strings):")
    for name, make in makers.items():
        gc.collect()
        tracemalloc.start()
        t0 = time.perf_counter()
        records = [make(i) for i in range(n)]
        build = time.perf_counter() - t0
        size = tracemalloc.get_traced_memory()[0] / n
        tracemalloc.stop()
        t0 = time.perf_counter()
        gc.collect()
        full_gc = time.perf_counter() - t0
        print(f"  {name:26s} {size:6.0f} B/record  build {build / n * 1e9:5.0f} ns  "
              f"full GC {full_gc * 1e3:5.1f} ms  gc-tracked={gc.is_tracked(records[0])}")
        del records


# ---- baseline --------------------------------------------------------------------


class NaiveStore:
    """What one writes first: append tuples per author, sort everything at query time."""

    def __init__(self) -> None:
        self.by_author: dict[str, list[tuple[float, str, bool]]] = defaultdict(list)

    def apply(self, e: PostCreate) -> None:
        self.by_author[e.author_id].append((e.created_at, e.post_id, e.in_reply_to_post_id
                                            is not None))

    def query(self, following: list[str], max_results: int) -> list[str]:
        posts = [p for a in following for p in self.by_author.get(a, ())]
        posts.sort(reverse=True)
        return [p[1] for p in posts[:max_results]]


def seen_ids(store: ThunderStore, following: list[str], n: int) -> set[str]:
    """The newest original of the first `n` followed authors that have one."""
    out: set[str] = set()
    for author in following:
        posts = store.authors.get(author)
        if posts is not None and posts.originals:
            out.add(posts.originals[-1].post_id)
            if len(out) == n:
                break
    return out


# ---- main ------------------------------------------------------------------------


def main() -> None:
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    parser = argparse.ArgumentParser()
    parser.add_argument("--posts", type=int, default=1_000_000)
    parser.add_argument("--authors", type=int, default=100_000)
    parser.add_argument("--following", type=int, default=1_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--grpc-queries", type=int, default=300)
    args = parser.parse_args()

    layouts()

    settings = ThunderSettings(port=0)
    store = ThunderStore(settings)
    naive = NaiveStore()
    apply_s = json_s = naive_s = 0.0
    apply_cpu = json_cpu = 0.0  # CPU seconds: what other processes on the box cannot inflate
    json_events = 0
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for i, chunk in enumerate(events(args.posts, args.authors)):
        t0 = time.perf_counter()
        if i % 2 == 0:  # half the chunks through the full JSON path
            raw = [encode_event(e) for e in chunk]
            t0, c0 = time.perf_counter(), time.process_time()
            store.apply_many(decode_event(r) for r in raw)
            json_s += time.perf_counter() - t0
            json_cpu += time.process_time() - c0
            json_events += len(raw)
        else:
            c0 = time.process_time()
            store.apply_many(chunk)
            apply_s += time.perf_counter() - t0
            apply_cpu += time.process_time() - c0
        t0 = time.perf_counter()
        for e in chunk:
            naive.apply(e)
        naive_s += time.perf_counter() - t0
    applied = args.posts - json_events
    gc.collect()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"\nstore: {len(store):,} posts, {store.author_count:,} authors "
          f"(max RSS {rss / 1024:.0f} MiB, +{(rss - rss0) / 1024:.0f} MiB while loading "
          "both stores and the event chunks)")
    serving = getattr(store, "serving", None)  # absent from a store before issue 13's rows
    if serving is not None:
        print(f"  serving rows (slots, index, rows of each author's newest posts): "
              f"{serving.memory_bytes() / 2**20:.0f} MiB of the above")
    print("ingest (in process, one core; wall clock, and per CPU-second):")
    print(f"  apply decoded events       {applied / apply_s:10,.0f} events/s   "
          f"{applied / apply_cpu:10,.0f} /CPU-s")
    print(f"  decode JSON + apply        {json_events / json_s:10,.0f} events/s   "
          f"{json_events / json_cpu:10,.0f} /CPU-s")
    print(f"  baseline append-only       {args.posts / naive_s:10,.0f} events/s")

    rng = random.Random(11)
    viewers = [[f"u{rng.randrange(args.authors)}" for _ in range(args.following)]
               for _ in range(50)]
    lat: list[float] = []
    cpu: list[float] = []
    base: list[float] = []
    base_cpu: list[float] = []
    returned = []
    taken = []
    for q in range(args.queries):
        following = viewers[q % len(viewers)]
        query = InNetworkQuery(user_id="viewer", following_user_ids=following)
        t0, c0 = time.perf_counter(), time.thread_time()
        result = store.get_in_network_posts(query)
        lat.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
        returned.append(len(result.posts))
        taken.append(result.candidates)
        t0, c0 = time.perf_counter(), time.thread_time()
        naive.query(following, settings.default_max_results)
        base.append(time.perf_counter() - t0)
        base_cpu.append(time.thread_time() - c0)
    print(f"query in process ({args.queries} queries, following {args.following}, "
          f"~{statistics.mean(returned):.0f} posts returned, "
          f"of ~{statistics.mean(taken):.0f} under the per-author caps):")
    for name, xs in (("thunder store", lat), ("  (CPU time)", cpu), ("baseline sort-all", base),
                     ("  (CPU time)", base_cpu)):
        print(f"  {name:18s} p50 {pct(xs, 50) * 1e3:6.2f} ms   p99 {pct(xs, 99) * 1e3:6.2f} ms")
    print(f"  ratio baseline/thunder, wall: p50 x{pct(base, 50) / pct(lat, 50):.1f}, "
          f"p99 x{pct(base, 99) / pct(lat, 99):.1f};  CPU: p50 "
          f"x{pct(base_cpu, 50) / pct(cpu, 50):.1f}, p99 x{pct(base_cpu, 99) / pct(cpu, 99):.1f}")

    # The same viewers with a "seen" list: the newest post of 500 of their authors.
    def excluding(seen: list, title: str) -> None:
        """Time the viewers' queries with these seen lists (one per viewer)."""
        ex_lat: list[float] = []
        ex_cpu: list[float] = []
        for q in range(args.queries):
            query = InNetworkQuery(user_id="viewer",
                                   following_user_ids=viewers[q % len(viewers)],
                                   exclude_post_ids=seen[q % len(viewers)])
            t0, c0 = time.perf_counter(), time.thread_time()
            store.get_in_network_posts(query)
            ex_lat.append(time.perf_counter() - t0)
            ex_cpu.append(time.thread_time() - c0)
        print(title)
        for name, xs in (("thunder store", ex_lat), ("  (CPU time)", ex_cpu)):
            print(f"  {name:18s} p50 {pct(xs, 50) * 1e3:6.2f} ms   p99 {pct(xs, 99) * 1e3:6.2f} ms")

    seen = [seen_ids(store, following, 500) for following in viewers]
    excluding(seen, f"query in process excluding ~{statistics.mean(map(len, seen)):.0f} seen ids:")

    # A seen list near the feed's `max_seen` (10,000): the newest original of each
    # followed author, then random held posts; fresh strings, as parsed from a request.
    held = list(store.by_id)
    pick = random.Random(5)
    long_seen = []
    for following in viewers:
        ids = seen_ids(store, following, len(following))
        while len(ids) < 10_000:
            ids.add(pick.choice(held))
        long_seen.append({(i + "x")[:-1] for i in ids})
    excluding(long_seen, "query in process excluding 10,000 seen ids:")

    async def over_grpc(server_settings: ThunderSettings
                        ) -> tuple[list[float], list[float]]:
        server = ThunderServer(store, server_settings)
        port = await server.start()
        client = GrpcThunderClient(f"127.0.0.1:{port}", timeout_s=5, compression="none")
        await client.start()
        xs: list[float] = []
        cs: list[float] = []
        for q in range(args.grpc_queries):
            request = thunder_pb2.GetInNetworkPostsRequest(
                user_id="viewer", following_user_ids=viewers[q % len(viewers)])
            t0, c0 = time.perf_counter(), time.process_time()
            await client.call(request)
            xs.append(time.perf_counter() - t0)
            cs.append(time.process_time() - c0)  # client + server: one process
        await client.stop()
        await server.stop(0)
        return xs, cs

    print(f"query over gRPC ({args.grpc_queries} sequential calls, client and server in this "
          "process, so CPU time is both sides'):")
    variants = {
        # As before issue 13: gzip responses, every post's message built per call.
        "gzip, no encode cache": ThunderSettings(port=0, compression="gzip",
                                                 encoded_cache_posts=0),
        "default (cached, plain)": settings,
    }
    cpu_p50 = {}
    for name, server_settings in variants.items():
        xs, cs = asyncio.run(over_grpc(server_settings))
        cpu_p50[name] = pct(cs, 50)
        print(f"  {name:24s} wall p50 {pct(xs, 50) * 1e3:6.2f} ms  p99 {pct(xs, 99) * 1e3:6.2f} ms"
              f"   CPU p50 {pct(cs, 50) * 1e3:6.2f} ms  p99 {pct(cs, 99) * 1e3:6.2f} ms")
    ratio = cpu_p50["gzip, no encode cache"] / cpu_p50["default (cached, plain)"]
    print(f"  CPU ratio before/now x{ratio:.2f}")
    size = len(msgspec.json.encode([p.post_id for p in result.posts]))
    print(f"  (last response: {len(result.posts)} posts, ids alone {size:,} bytes of JSON)")


if __name__ == "__main__":
    main()
