"""The packaged MiniLM against the integer one grebe runs, side by side on real tweets.

    .venv/bin/python bench/encoder.py [--texts 1024] [--rounds 3] [--threads 1]

Prints CPU ms per text for each (process CPU, so a busy machine inflates all alike;
rounds interleaved, best kept): the packaged model in its passes of 8, the integer model
one text a pass (what grebe serves) and in passes of 8; how far the integer vectors move
(cosine to the packaged model's vector of the same text, p50 / p1 / min, and the overlap
of each tweet's 10 nearest neighbours under the two models: what retrieval sees); and why
the integer model runs one text a pass: in passes of 8 a text's vector depends on its
pass-mates (cosine to the same text encoded alone).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from grebe.inference.minilm import PACKAGED_NAME, MiniLMModel
from grebe.inference.minilm_quant import QUANTIZED_NAME as MODEL_NAME

TWEETS = Path(__file__).parent / "data" / "tweets.jsonl"


def cpu_ms_per_text(model: MiniLMModel, texts: list[str]) -> tuple[float, np.ndarray]:
    started = time.process_time()
    vectors = model.encode(texts)
    return 1000 * (time.process_time() - started) / len(texts), vectors


def neighbour_overlap(a: np.ndarray, b: np.ndarray, k: int = 10) -> float:
    def top(m: np.ndarray) -> np.ndarray:
        sims = m @ m.T
        np.fill_diagonal(sims, -2)
        return np.argsort(-sims, axis=1)[:, :k]

    ta, tb = top(a), top(b)
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(ta, tb, strict=True)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    texts = [json.loads(line)["text"] for line in TWEETS.read_text().splitlines()][: args.texts]
    batched = f"{MODEL_NAME}, passes of 8"
    models = {
        PACKAGED_NAME: MiniLMModel(intra_op_threads=args.threads, quantize=False),
        MODEL_NAME: MiniLMModel(intra_op_threads=args.threads, quantize=True),
        batched: MiniLMModel(intra_op_threads=args.threads, quantize=True, run_batch_size=8),
    }
    for model in models.values():
        model.encode(texts[:64])  # warm-up
    best = dict.fromkeys(models, float("inf"))
    vectors: dict[str, np.ndarray] = {}
    for _ in range(args.rounds):
        for name, model in models.items():
            ms, vectors[name] = cpu_ms_per_text(model, texts)
            best[name] = min(best[name], ms)
    print(
        f"{len(texts)} real tweets, {args.threads} intra-op thread(s), "
        f"load average {os.getloadavg()[0]:.1f}, best of {args.rounds} interleaved rounds"
    )
    for name, ms in best.items():
        print(f"  {name:36s} {ms:6.2f} ms CPU per text")
    print(f"  speed-up                 {best[PACKAGED_NAME] / best[MODEL_NAME]:6.2f}x")
    cosine = (vectors[PACKAGED_NAME] * vectors[MODEL_NAME]).sum(axis=1)
    print(
        f"  cosine to packaged       p50 {np.median(cosine):.4f}  "
        f"p1 {np.percentile(cosine, 1):.4f}  min {cosine.min():.4f}"
    )
    overlap = neighbour_overlap(vectors[PACKAGED_NAME], vectors[MODEL_NAME])
    print(f"  10-NN overlap            {overlap:.3f}")
    mates = (vectors[batched] * vectors[MODEL_NAME]).sum(axis=1)
    print(
        f"  passes of 8 vs alone     p50 {np.median(mates):.4f}  min {mates.min():.4f}"
        " (cosine of a text's vector with pass-mates to its vector alone)"
    )


if __name__ == "__main__":
    main()
