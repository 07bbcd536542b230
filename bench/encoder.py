"""The packaged MiniLM against the integer one grebe runs, side by side on real tweets.

    .venv/bin/python bench/encoder.py [--texts 1024] [--rounds 3] [--threads 1]

Prints CPU ms per text for each (process CPU, so a busy machine inflates all alike;
rounds interleaved, best kept): the packaged model in its passes of 8, the integer model
one text a pass (what grebe serves) and in passes of 8, and the integer model without
the attention/GELU fusions (the recipe before them, built into a temporary directory),
with the cosine of the served vectors to it (the heads' bar: p50 >= 0.995, min >= 0.98);
how far the integer vectors move
(cosine to the packaged model's vector of the same text, p50 / p1 / min, and the overlap
of each tweet's 10 nearest neighbours under the two models: what retrieval sees); and why
the integer model runs one text a pass: in passes of 8 a text's vector depends on its
pass-mates (cosine to the same text encoded alone).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from grebe.inference.minilm import PACKAGED_NAME, MiniLMModel, packaged_model_files
from grebe.inference.minilm_quant import QUANTIZED_NAME as MODEL_NAME
from grebe.inference.minilm_quant import _derive

UNFUSED = f"{MODEL_NAME} unfused, one a pass"

TWEETS = Path(__file__).parent / "data" / "tweets.jsonl"
TEST_DATA = Path(__file__).resolve().parent.parent / "tests" / "inference" / "data"


def head_flips(unfused: MiniLMModel, served: MiniLMModel, texts: list[str]) -> str:
    """Verdicts of the packaged heads (each binary head at its threshold) that differ
    between the unfused and the served vectors of the same texts, per head."""
    from grebe.inference.heads import TextHeads

    heads = TextHeads.load()
    before = heads.predict(unfused.encode(texts), texts)
    after = heads.predict(served.encode(texts), texts)
    parts = []
    for name, info in heads.heads.items():
        if len(info.classes) != 2:
            continue
        cut = info.thresholds[info.classes[1]]
        flips = int(((before[name][:, 1] >= cut) != (after[name][:, 1] >= cut)).sum())
        moved = float(np.abs(before[name][:, 1] - after[name][:, 1]).max())
        parts.append(f"{name} {flips} (max |dp| {moved:.3f})")
    return ", ".join(parts)


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
    unfused_dir = Path(tempfile.mkdtemp(prefix="grebe-unfused-"))
    _derive(*packaged_model_files(), unfused_dir, fused_graph=False)
    models = {
        PACKAGED_NAME: MiniLMModel(intra_op_threads=args.threads, quantize=False),
        MODEL_NAME: MiniLMModel(intra_op_threads=args.threads, quantize=True),
        batched: MiniLMModel(intra_op_threads=args.threads, quantize=True, run_batch_size=8),
        UNFUSED: MiniLMModel(unfused_dir, intra_op_threads=args.threads, quantize=False,
                             run_batch_size=1),
    }
    shutil.rmtree(unfused_dir)  # loaded: the session holds the graph
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
        print(f"  {name:40s} {ms:6.3f} ms CPU per text")
    print(f"  speed-up                 {best[PACKAGED_NAME] / best[MODEL_NAME]:6.2f}x")
    cosine = (vectors[PACKAGED_NAME] * vectors[MODEL_NAME]).sum(axis=1)
    print(
        f"  cosine to packaged       p50 {np.median(cosine):.4f}  "
        f"p1 {np.percentile(cosine, 1):.4f}  min {cosine.min():.4f}"
    )
    overlap = neighbour_overlap(vectors[PACKAGED_NAME], vectors[MODEL_NAME])
    print(f"  10-NN overlap            {overlap:.3f}")
    fusion = (vectors[UNFUSED] * vectors[MODEL_NAME]).sum(axis=1)
    print(
        f"  fused vs unfused         p50 {np.median(fusion):.6f}  p1 {np.percentile(fusion, 1):.6f}"
        f"  min {fusion.min():.6f}  ({(fusion < 0.995).sum()} of {len(texts)} below 0.995)"
    )
    sanity = [p["text"] for p in json.loads(
        (TEST_DATA / "heads_sanity_posts.json").read_text())["posts"]]
    hatecheck = [c["text"] for c in json.loads(
        (TEST_DATA / "hatecheck_sample.json").read_text())["cases"]]
    for label, some in (("tweets", texts), ("sanity set", sanity), ("HateCheck", hatecheck)):
        flips = head_flips(models[UNFUSED], models[MODEL_NAME], some)
        print(f"  head verdicts changed by the fusion, {len(some)} {label}: {flips}")
    mates = (vectors[batched] * vectors[MODEL_NAME]).sum(axis=1)
    print(
        f"  passes of 8 vs alone     p50 {np.median(mates):.4f}  min {mates.min():.4f}"
        " (cosine of a text's vector with pass-mates to its vector alone)"
    )


if __name__ == "__main__":
    main()
