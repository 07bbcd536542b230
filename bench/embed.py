"""Embedding throughput: the raw ONNX model at its best batch size vs the micro-batched
service fed by many concurrent single-text requests, in one process run.

    .venv/bin/python bench/embed.py [--texts 512] [--concurrency 256] [--threads N]

The service figure is what tasks see (one embed([text]) per task, 256 at once); the
raw figure is the ceiling (texts handed to the model in ideal batches, no asyncio, no
queue). The ratio says what the batcher costs; the target is >= 90%.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time

from grebe.inference.minilm import MiniLMEmbedder, MiniLMModel

WORDS = [
    "the",
    "a",
    "new",
    "post",
    "video",
    "photo",
    "today",
    "great",
    "awful",
    "free",
    "offer",
    "click",
    "link",
    "follow",
    "reply",
    "thread",
    "music",
    "game",
    "match",
    "goal",
    "news",
    "city",
    "rain",
    "sun",
    "coffee",
    "cat",
    "dog",
    "love",
    "hate",
    "buy",
    "sell",
    "crypto",
    "stock",
    "market",
    "vote",
    "election",
    "team",
    "win",
    "lose",
    "best",
    "worst",
    "ever",
    "never",
    "always",
]


def make_posts(n: int, seed: int = 7) -> list[str]:
    """Social-post-like texts, 3-60 words, so padding and length sorting matter."""
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(3, 60))) for _ in range(n)]


def raw_throughput(model: MiniLMModel, texts: list[str], call: int, run: int) -> float:
    """Texts handed straight to the model, `call` per encode(), `run` per forward pass."""
    model.run_batch_size = run
    started = time.perf_counter()
    for i in range(0, len(texts), call):
        model.encode(texts[i : i + call])
    return len(texts) / (time.perf_counter() - started)


async def service_throughput(
    texts: list[str], concurrency: int, threads: int, call: int, run: int
) -> tuple[float, float]:
    """`concurrency` tasks each awaiting embed([one text]) until the texts run out."""
    embedder = MiniLMEmbedder(
        max_batch_size=call, max_wait_ms=2, intra_op_threads=threads, run_batch_size=run
    )
    await embedder.start()
    queue: asyncio.Queue[str] = asyncio.Queue()
    for text in texts:
        queue.put_nowait(text)

    async def worker() -> None:
        while not queue.empty():
            await embedder.embed([queue.get_nowait()])

    try:
        await embedder.embed(texts[:8])  # warm-up
        assert embedder.batcher is not None
        batches_before = embedder.batcher.batches
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        batches = embedder.batcher.batches - batches_before
    finally:
        await embedder.stop()
    return len(texts) / elapsed, len(texts) / max(batches, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=3, help="best of N, interleaved")
    parser.add_argument(
        "--configs", default="1x1,16x16,64x64,64x8,64x16", help="call x run batch sizes"
    )
    args = parser.parse_args()

    texts = make_posts(args.texts)
    model = MiniLMModel(intra_op_threads=args.threads)
    model.encode(texts[:16])  # warm-up
    configs = [tuple(int(n) for n in c.split("x")) for c in args.configs.split(",")]
    print(
        f"{args.texts} posts (3-60 words), {args.threads} intra-op threads, "
        f"cpu_count={os.cpu_count()}, load average {os.getloadavg()[0]:.1f}, "
        f"best of {args.rounds} interleaved rounds"
    )
    raw: dict[tuple[int, ...], float] = {c: 0.0 for c in configs}
    service, mean_batch = 0.0, 0.0
    for _ in range(args.rounds):
        for call, run in configs:
            raw[(call, run)] = max(raw[(call, run)], raw_throughput(model, texts, call, run))
        best = max(raw, key=lambda c: raw[c])
        rate, batch = asyncio.run(
            service_throughput(texts, args.concurrency, args.threads, best[0], best[1])
        )
        if rate > service:
            service, mean_batch = rate, batch
    for (call, run), rate in raw.items():
        print(
            f"raw model, {call:>3} texts per call, {run:>3} per forward pass: {rate:7.1f} texts/s"
        )
    best = max(raw, key=lambda c: raw[c])
    print(
        f"service ({best[0]} per batch, {best[1]} per pass), {args.concurrency} concurrent "
        f"single-text requests: {service:7.1f} texts/s (mean batch {mean_batch:.1f})"
    )
    print(f"ratio service / best raw: {service / raw[best]:.1%}")


if __name__ == "__main__":
    main()
