"""The encoder thread beside a busy event loop: what the GIL switch interval costs it.

    .venv/bin/python bench/gil_handoff.py [--texts N] [--rounds R] [--interval-ms MS]

An engine's encoder runs one ONNX pass per text in a thread (~2 ms, without the GIL),
then needs the GIL back to pool the result and start the next pass. While the event
loop thread runs Python, CPython makes a thread that wants the GIL wait for the switch
interval (5 ms by default) before it asks the holder to let go. This runs N real tweets
through the MiniLM encoder in passes of one text, as the engine's batcher does, alone
and beside a thread that only runs Python (the busy loop), at CPython's 5 ms and at a
shorter switch interval (`--interval-ms`, 0.5 by default), alternating, and prints wall
and CPU ms per text for each. On two cores, beside the busy thread, the encoder would
keep its own pace if the hand-off cost nothing. (A shorter interval in engines moved
neither CPU per post nor posts/s of `bench/realflows.py`: docs/benchmarks.md, "The
engine's own CPU: collector, GIL hand-off, store rows".)
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import grebe.blas  # noqa: F401  as `grebe` does: one BLAS thread before NumPy loads

TWEETS = Path(__file__).resolve().parent / "data" / "tweets.jsonl"
CPYTHON_DEFAULT_S = 0.005


def spin(stop: threading.Event) -> None:
    """Pure Python, never releasing the GIL of its own accord: the busy event loop."""
    total = 0
    while not stop.is_set():
        for i in range(1000):
            total += i


def trial(model: object, items: list, interval_s: float, busy: bool) -> tuple[float, float]:
    """Wall and encoder-thread CPU ms per text."""
    sys.setswitchinterval(interval_s)
    stop = threading.Event()
    spinner = threading.Thread(target=spin, args=(stop,), daemon=True)
    if busy:
        spinner.start()
    wall, cpu = time.perf_counter(), time.thread_time()
    for i in range(0, len(items), 64):  # the batcher's batches, one text a pass
        model.encode_parts(items[i:i + 64])  # type: ignore[attr-defined]
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    stop.set()
    if busy:
        spinner.join()
    return 1000 * wall / len(items), 1000 * cpu / len(items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--interval-ms", type=float, default=0.5,
                        help="the switch interval to compare with CPython's 5 ms")
    args = parser.parse_args()
    from grebe.inference.minilm import MiniLMModel

    model = MiniLMModel(intra_op_threads=1)
    texts = [json.loads(line)["text"] for line in TWEETS.read_text().splitlines()]
    items = [(text, ()) for text in texts[:args.texts]]
    model.encode_parts(items[:32])  # warm up
    shorter_s = args.interval_ms / 1000
    for round_ in range(1, args.rounds + 1):
        for interval_s in (CPYTHON_DEFAULT_S, shorter_s):
            for busy in (False, True):
                wall, cpu = trial(model, items, interval_s, busy)
                print(f"round {round_}  switch interval {1000 * interval_s:3.1f} ms  "
                      f"{'beside a busy thread' if busy else 'alone               '}  "
                      f"{wall:6.2f} ms wall, {cpu:5.2f} ms CPU per text", flush=True)


if __name__ == "__main__":
    main()
