"""Home-timeline benchmark: requests that rank ~1,500 candidates each, at a fixed rate.

    .venv/bin/python bench/feed.py [--rate 200] [--seconds 10] [--viewers 200]
        [--posts 60000] [--authors 6000] [--following 400] [--dim 384] [--profile OUT]
        [--max-in-flight N] [--start-at EPOCH] [--seen N]

One process, one event loop: an in-process thunder store of `--posts` posts, an
annotation store (SQLite, as `grebe feed-serve` uses by default) holding a label, a
quality score and a `--dim` embedding per post, the out-of-network ANN index over the
same embeddings. Viewers follow `--following` random authors and engaged with 5 posts;
each request asks thunder for up to 1,000 in-network and the index for 500
out-of-network posts, so ~1,500 candidates are hydrated, filtered, scored and ranked.

Requests arrive open-loop at `--rate` per second (a request's latency includes any
wait behind earlier ones) for `--seconds`, each from a different viewer in turn. With
`--max-in-flight N`, a request arriving while N are running is refused at once, as
`feed-serve`'s admission control answers 503 (counted, not in the latencies).
Printed: latency p50/p99, CPU time per request (what the code costs, whatever the
neighbours' load), the highest rate one core could sustain (1 / CPU per request), how
many out-of-network neighbourhoods were kept or searched (a viewer returns every
`--viewers / --rate` seconds; `feed.neighbourhood_cache_s` keeps one 30 s), and
each pipeline component's median wall time (near its CPU at a rate the core keeps up
with; inflated by waits when requests queue).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from grebe.core.engine_process import tune_gc
from grebe.feed.admission import Admission
from grebe.feed.blas import use_one_thread
from grebe.feed.home import build_home_pipeline
from grebe.feed.settings import FeedSettings
from grebe.feed.viewers import MemoryViewerDirectory, Viewer
from grebe.stores.sqlite import SqliteStore
from grebe.thunder.events import PostCreate
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import ThunderStore
from grebe.types import Annotation

FEED = FeedSettings(in_network_max=1000, out_of_network_max=500, min_similarity=0.0,
                    max_results=50, component_timeout_s=5.0)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))]


async def load_posts(feed: Any, thunder: ThunderStore, *, posts: int, authors: int,
                     centres: np.ndarray, now: float, rng: np.random.Generator,
                     prng: random.Random) -> None:
    """The bench world (shared with bench/feed_components.py): `posts` posts over 40 hours
    from `authors` authors into thunder, each with an embedding near one of the `centres`
    in the feed's annotation store."""
    batch: list[Annotation] = []
    for i in range(posts):
        pid = f"p{i}"
        thunder.apply(PostCreate(post_id=pid, author_id=f"u{prng.randrange(authors)}",
                                 created_at=now - 40 * 3600 * (1 - i / posts)))
        vector = centres[i % len(centres)] + rng.normal(
            scale=0.8, size=centres.shape[1]).astype(np.float32)
        batch.append(Annotation(post_id=pid, producer="embedding", version="1",
                                labels=["safe"], scores={"quality": prng.random()},
                                embedding=(vector / np.linalg.norm(vector)).tolist()))
        if len(batch) == 2000:
            await feed.annotations.upsert(batch)
            batch = []
    if batch:
        await feed.annotations.upsert(batch)


async def run(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(3)
    prng = random.Random(3)
    now = time.time()
    settings = ThunderSettings(max_originals_per_author=64, serve_originals_per_author=5,
                               serve_secondary_per_author=3)
    thunder = ThunderStore(settings)
    centres = rng.normal(size=(20, args.dim)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "annotations.db")
        await store.start()
        viewers = MemoryViewerDirectory()
        feed = build_home_pipeline(FEED, store, thunder, None, viewers=viewers, dim=args.dim)
        t0 = time.perf_counter()
        await load_posts(feed, thunder, posts=args.posts, authors=args.authors,
                         centres=centres, now=now, rng=rng, prng=prng)
        print(f"loaded {args.posts:,} posts in {time.perf_counter() - t0:.0f} s; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        names = [f"v{n}" for n in range(args.viewers)]
        for name in names:
            viewers.viewers[name] = Viewer(
                user_id=name,
                following=[f"u{prng.randrange(args.authors)}" for _ in range(args.following)],
                engaged=[f"p{prng.randrange(args.posts)}" for _ in range(5)])
        for name in names:  # a viewer served for a while (--seen: at most max_seen)
            if args.seen:
                await viewers.record_served(
                    name, [f"p{prng.randrange(args.posts)}" for _ in range(args.seen)])
        await feed.start()

        latencies: list[float] = []
        cpu: list[float] = []
        candidates: list[int] = []
        components: dict[str, list[float]] = {}  # component -> wall seconds per request

        admission = Admission(args.max_in_flight) if args.max_in_flight else None
        rejected = 0

        async def one(name: str, scheduled: float) -> None:
            nonlocal rejected
            if admission is not None and not admission.try_enter():
                rejected += 1  # feed-serve answers 503 at once (grebe.feed.admission)
                return
            try:
                await admitted(name, scheduled)
            finally:
                if admission is not None:
                    admission.leave()

        async def admitted(name: str, scheduled: float) -> None:
            c0 = time.thread_time()
            result = await feed.home(name)
            cpu.append(time.thread_time() - c0)  # includes interleaved requests' slices
            latencies.append(time.perf_counter() - scheduled)
            candidates.append(len(result.retrieved))
            for name, seconds in result.timings.items():
                components.setdefault(name, []).append(seconds)

        # Steady state: the candidates' features are in memory (every post read once).
        assert feed.features is not None
        await feed.features.get_many([f"p{i}" for i in range(args.posts)])
        for name in names[:5]:  # warm up
            await feed.home(name)
        if args.freeze:  # as `grebe feed-serve` does once loaded: GC skips what is held
            tune_gc()  # and collects the requests' short-lived objects in fewer passes
            use_one_thread()  # and ranks with one BLAS thread (grebe.feed.blas)
        if args.start_at:  # an A/B run beside another process: time the same period
            await asyncio.sleep(max(0.0, args.start_at - time.time()))
        total = int(args.rate * args.seconds)
        interval = 1.0 / args.rate
        # CPU time, not wall: on a shared box a wall-clock profile charges C calls (usearch,
        # numpy) with the time the process waited for a core.
        profiler = cProfile.Profile(time.process_time) if args.profile else None
        if profiler is not None:
            profiler.enable()
        start = time.perf_counter()
        c_start = time.process_time()
        tasks = []
        for n in range(total):
            scheduled = start + n * interval
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(names[n % len(names)], scheduled)))
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - start
        served = total - rejected
        cpu_per = (time.process_time() - c_start) / max(1, served)
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(args.profile)
        await feed.aclose()
        await store.stop()
    print(f"{total} requests at {args.rate}/s offered ({served / wall:.0f}/s served, "
          f"{rejected} refused by admission control), "
          f"~{statistics.mean(candidates):.0f} candidates each, load average "
          f"{os.getloadavg()[0]:.1f}")
    p50, p99 = pct(latencies, 50) * 1e3, pct(latencies, 99) * 1e3
    print(f"  latency p50 {p50:7.1f} ms   p99 {p99:7.1f} ms (served requests)")
    print(f"  CPU per request (process) {cpu_per * 1e3:.1f} ms -> one core sustains "
          f"~{1 / cpu_per:.0f} requests/s")
    hoods = getattr(feed.pipeline.sources[-1], "neighbourhoods", None)
    if hoods is not None:  # grebe.feed.neighbourhood: searches saved by the kept ones
        print(f"  out-of-network neighbourhoods: {hoods.hits} kept, {hoods.misses} searched")
    print("  component wall p50 (ms): " + ", ".join(
        f"{name} {statistics.median(values) * 1e3:.2f}" for name, values in components.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--viewers", type=int, default=200)
    parser.add_argument("--posts", type=int, default=60_000)
    parser.add_argument("--authors", type=int, default=6_000)
    parser.add_argument("--following", type=int, default=400)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--max-in-flight", type=int, default=0,
                        help="admission control as feed-serve's max_concurrent_requests: "
                             "requests beyond this many in flight are refused (0: none)")
    parser.add_argument("--seen", type=int, default=0,
                        help="posts recorded as served to each viewer before timing (a "
                             "viewer at sustained load reaches max_seen, 10,000)")
    parser.add_argument("--profile", type=Path, default=None,
                        help="write a cProfile of the timed requests here (pstats)")
    parser.add_argument("--start-at", type=float, default=0.0,
                        help="start the timed requests at this epoch time (after loading), "
                             "so two versions run side by side are timed over one period")
    parser.add_argument("--no-freeze", dest="freeze", action="store_false",
                        help="do not freeze the loaded state nor raise the GC thresholds "
                             "(grebe.core.engine_process.tune_gc) before timing")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
