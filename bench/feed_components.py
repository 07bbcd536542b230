"""Where a home request's CPU goes: each pipeline component timed alone, in CPU time.

    .venv/bin/python bench/feed_components.py [--posts 30000] [--authors 3000]
        [--viewers 30] [--repeat 5]

The state of bench/feed.py (thunder with `--posts` posts, SQLite annotations, the ANN
index, 200 viewers following 400 authors with 5 engaged posts, features in memory).
For each of `--viewers` viewers, one request is taken apart: every query hydrator,
source, hydrator, filter, scorer and the selector is called `--repeat` times on the
same input and its `time.thread_time` averaged; joining the sources' candidate frames
("join sources") and applying a hydrator's or scorer's columns to the candidates
("apply:") are timed on their own. The out-of-network source is timed twice: searching
("similar_posts (search)", its neighbourhood forgotten before each call) and picking
from the viewer's kept neighbourhood ("similar_posts", a returning viewer within
`feed.neighbourhood_cache_s`). Then the whole `home()` is timed once (a search: the
viewer's first request), and again right after ("returning": its served posts
recorded, its neighbourhood kept). Printed: the median per component over the
viewers. bench/feed.py's component figures are wall times of concurrent components;
these are each one's CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

from feed import FEED, load_posts  # bench/feed.py: the same settings and posts
from grebe.feed.blas import use_one_thread
from grebe.feed.candidates import HomeQuery
from grebe.feed.components import apply_patch, apply_patches
from grebe.feed.home import build_home_pipeline
from grebe.feed.pipeline import joined
from grebe.feed.viewers import MemoryViewerDirectory, Viewer
from grebe.stores.sqlite import SqliteStore
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import ThunderStore

DIM = 384


async def run(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(3)
    prng = random.Random(3)
    now = time.time()
    thunder = ThunderStore(ThunderSettings(max_originals_per_author=64,
                                           serve_originals_per_author=5,
                                           serve_secondary_per_author=3))
    centres = rng.normal(size=(20, DIM)).astype(np.float32)
    cost: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        cost.setdefault(name, []).append(seconds)

    async def timed(name: str, call: Callable[[], Awaitable[Any]]) -> Any:
        c0 = time.thread_time()
        for _ in range(args.repeat):
            out = await call()
        add(name, (time.thread_time() - c0) / args.repeat)
        return out

    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "annotations.db")
        await store.start()
        viewers = MemoryViewerDirectory()
        feed = build_home_pipeline(FEED, store, thunder, None, viewers=viewers, dim=DIM)
        await load_posts(feed, thunder, posts=args.posts, authors=args.authors,
                         centres=centres, now=now, rng=rng, prng=prng)
        names = [f"v{n}" for n in range(200)]
        for name in names:
            viewers.viewers[name] = Viewer(
                user_id=name,
                following=[f"u{prng.randrange(args.authors)}" for _ in range(400)],
                engaged=[f"p{prng.randrange(args.posts)}" for _ in range(5)])
        await feed.start()
        assert feed.features is not None
        await feed.features.get_many([f"p{i}" for i in range(args.posts)])
        gc.collect()
        gc.freeze()
        use_one_thread()  # as feed-serve does (grebe.feed.blas)
        p = feed.pipeline
        for name in names[: args.viewers]:
            query = HomeQuery(user_id=name, max_results=FEED.max_results, now=now + 60)
            for qh in p.query_hydrators:
                apply_patch(query, await timed(qh.name, lambda qh=qh, q=query: qh.hydrate(q)))
            fetched = []
            for source in p.sources:
                hoods = getattr(source, "neighbourhoods", None)
                if hoods is not None:  # a search, then picks from the kept neighbourhood
                    async def searched(s: Any = source, q: HomeQuery = query) -> Any:
                        s.neighbourhoods.clear()
                        return await s.fetch(q)
                    await timed(f"{source.name} (search)", searched)
                fetched.append(await timed(source.name, lambda s=source, q=query: s.fetch(q)))
            c0 = time.thread_time()
            candidates = joined(fetched)  # one frame of the sources' columns
            add("join sources", time.thread_time() - c0)
            for hydrator in p.hydrators:
                columns = await timed(hydrator.name,
                                      lambda h=hydrator, q=query, c=candidates: h.hydrate(q, c))
                c0 = time.thread_time()
                apply_patches(candidates, columns)
                add(f"apply:{hydrator.name}", time.thread_time() - c0)
            for flt in p.filters:
                candidates, _ = await timed(flt.name,
                                            lambda f=flt, q=query, c=candidates: f.filter(q, c))
            for scorer in p.scorers:
                columns = await timed(scorer.name,
                                      lambda s=scorer, q=query, c=candidates: s.score(q, c))
                c0 = time.thread_time()
                apply_patches(candidates, columns)
                add(f"apply:{scorer.name}", time.thread_time() - c0)
            await timed("select", lambda q=query, c=candidates: p.selector.select(q, c))
            for source in p.sources:
                hoods = getattr(source, "neighbourhoods", None)
                if hoods is not None:
                    hoods.clear()
            c0 = time.thread_time()
            await feed.home(name, now=now + 60)
            add("whole home()", time.thread_time() - c0)
            await feed.pipeline.aclose()  # served posts recorded: the viewer returns
            c0 = time.thread_time()
            await feed.home(name, now=now + 61)
            add("whole home() (kept)", time.thread_time() - c0)
        await feed.aclose()
        await store.stop()
    whole = statistics.median(cost.pop("whole home()"))
    kept = cost.pop("whole home() (kept)", None)
    print(f"CPU per component (median of {args.viewers} requests, ms; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores):")
    for name, values in cost.items():
        print(f"  {name:26s} {statistics.median(values) * 1e3:7.2f}")
    parts = sum(statistics.median(v) for n, v in cost.items()
                if n != "similar_posts")  # a first request: with the search, not the pick
    print(f"  {'sum of the parts (search)':26s} {parts * 1e3:7.2f}")
    print(f"  {'whole home()':26s} {whole * 1e3:7.2f}")
    if kept:
        print(f"  {'whole home(), returning':26s} {statistics.median(kept) * 1e3:7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--posts", type=int, default=30_000)
    parser.add_argument("--authors", type=int, default=3_000)
    parser.add_argument("--viewers", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
