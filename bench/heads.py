"""CPU ms per post: the trained text heads vs the encoder pass they share, and vs the
separate text models the flows ran per post before (alt-profanity-check, HateSonar, the
SpamAssassin spam head).

    .venv/bin/python bench/heads.py [--posts 512] [--repeat 5] [--threads 1]

Posts are real tweets-like texts from the hand-written sanity set, cycled to --posts.
Each figure is the best of --repeat runs (least disturbed by other load), divided by
the number of posts. One encoder pass per post is the cost; the heads should be a
small fraction of it.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from grebe.inference.heads import TextHeads
from grebe.inference.minilm import MiniLMModel
from grebe.inference.spam_head import SpamHead
from grebe.inference.text import HateSonarClassifier, ProfanityClassifier

SANITY = (
    Path(__file__).resolve().parents[1] / "tests" / "inference" / "data" / "heads_sanity_posts.json"
)


def best_ms_per_post(fn: Callable[[], Any], posts: int, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.process_time()
        fn()
        times.append(time.process_time() - started)
    return 1000 * min(times) / posts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    texts = [p["text"] for p in json.loads(SANITY.read_text())["posts"]]
    texts = [texts[i % len(texts)] for i in range(args.posts)]

    model = MiniLMModel(intra_op_threads=args.threads)
    heads = TextHeads.load()
    spam = SpamHead.load()
    profanity, sonar = ProfanityClassifier(), HateSonarClassifier()
    profanity._load()
    sonar._load()
    vectors = model.encode(texts)

    rows = {
        "encoder pass (MiniLM int8, batched)": best_ms_per_post(
            lambda: model.encode(texts), args.posts, args.repeat
        ),
        f"all {len(heads.heads)} heads, batch of {args.posts}": best_ms_per_post(
            lambda: heads.predict(vectors, texts), args.posts, args.repeat
        ),
        "all heads, one post at a time": best_ms_per_post(
            lambda: [
                heads.predict(vectors[i : i + 1], texts[i : i + 1]) for i in range(args.posts)
            ],
            args.posts,
            args.repeat,
        ),
        "of which char n-gram TF-IDF heads, batch": best_ms_per_post(
            lambda: heads.ngrams.probabilities(texts) if heads.ngrams else None,
            args.posts,
            args.repeat,
        ),
        "of which char n-gram TF-IDF heads, one post at a time": best_ms_per_post(
            lambda: [heads.ngrams.probabilities(texts[i : i + 1]) if heads.ngrams else None
                     for i in range(args.posts)],
            args.posts,
            args.repeat,
        ),
        "before: spam head (SpamAssassin), batch": best_ms_per_post(
            lambda: spam.score(vectors), args.posts, args.repeat
        ),
        "before: alt-profanity-check, batch": best_ms_per_post(
            lambda: profanity._predict(texts), args.posts, args.repeat
        ),
        "before: HateSonar, batch": best_ms_per_post(
            lambda: sonar._predict(texts), args.posts, args.repeat
        ),
    }
    print(
        f"{args.posts} posts, best of {args.repeat}, CPU time, threads={args.threads}"
    )
    for name, ms in rows.items():
        print(f"  {name:45s} {ms:8.4f} ms/post")
    before = sum(v for k, v in rows.items() if k.startswith("before"))
    after = rows[f"all {len(heads.heads)} heads, batch of {args.posts}"]
    print(
        f"  text models beside the encoder: before {before:.4f} ms/post, after {after:.4f} ms/post "
        f"({np.float64(before / after):.0f}x less)"
    )


if __name__ == "__main__":
    main()
