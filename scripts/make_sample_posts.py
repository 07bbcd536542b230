"""Regenerate src/grebe/data/sample_posts.jsonl, the demo's bundled sample (deterministic).

~200 posts in the shapes grebe meets: plain posts, replies, quotes, links, shouting,
emoji, other languages, media, empty text; plus a few malformed lines (rejected at
ingest) and a few well-formed JSON lines that are not posts (dead-lettered).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "src" / "grebe" / "data" / "sample_posts.jsonl"

TEXTS = [
    "Just shipped the new release 🎉 thanks to everyone who tested the beta",
    "Does anyone know a good ramen place near the station? asking for a friend",
    "Hot take: tabs are fine, the real problem is mixing them with spaces",
    "Morning run done. 10k in 52 minutes, legs are complaining",
    "Reading about stream processing and offsets today. Commit after processing, always.",
    "The sunset from the pier tonight was unreal",
    "Our team is hiring backend engineers, remote friendly: https://example.com/jobs",
    "Thread on how we cut our p99 latency in half (1/7)",
    "Coffee number three. It is only 10am.",
    "New blog post: what we learned running SQLite in production https://example.org/blog/sqlite",
    "I can't believe the season finale ended like that",
    "Free webinar next week on observability, sign up here https://example.net/webinar",
    "THIS IS THE BEST DAY OF MY LIFE WE WON THE CHAMPIONSHIP",
    "WHY DOES MY CODE ONLY WORK ON FRIDAYS",
    "STOP SCROLLING AND READ THIS NOW",
    "La réunion est reportée à demain matin, merci de votre patience",
    "Hoy aprendí algo nuevo sobre bases de datos distribuidas",
    "Das Wetter ist heute einfach perfekt für einen Spaziergang",
    "今日はとても良い天気ですね",
    "Win a FREE phone!!! click https://free-prizes.example.biz now limited offer",
    "Earn $500 a day from home, DM me for the secret",
    "Great question, I think the answer depends on your write volume",
    "Totally agree with this, well said",
    "Here is the chart from yesterday's talk",
    "Video of the keynote is up",
    "lol",
    "Anyone else's build broken after the update?",
    "Grateful for this community ❤️",
    "Trying the new bakery on 5th street, the croissants are 10/10",
    "Benchmarks are only useful if you publish the baseline next to them",
]


def main() -> None:
    rng = random.Random(20240601)
    lines: list[str] = []
    ids: list[str] = []
    for i in range(196):
        post_id = f"sample-{i:04d}"
        post: dict[str, object] = {
            "id": post_id,
            "author_id": f"user-{rng.randrange(40):03d}",
            "text": rng.choice(TEXTS),
            "lang": None,
            "created_at": 1_717_200_000 + i * 37,
            "like_count": rng.randrange(0, 500),
            "reply_count": rng.randrange(0, 40),
            "repost_count": rng.randrange(0, 60),
            "view_count": rng.randrange(10, 20_000),
        }
        if ids and rng.random() < 0.25:
            post["reply_to_post_id"] = rng.choice(ids)
            post["conversation_id"] = post["reply_to_post_id"]
        elif ids and rng.random() < 0.05:
            post["quote_of_post_id"] = rng.choice(ids)
        if rng.random() < 0.1:
            post["media"] = [
                {
                    "kind": "image",
                    "url": f"https://media.example.com/{post_id}.jpg",
                    "width": 1200,
                    "height": 800,
                }
            ]
        if i % 41 == 7:
            post["text"] = ""  # nothing to analyse: the basic plan skips it
        if rng.random() < 0.3:
            message: dict[str, object] = {
                "post": post,
                "user": {
                    "id": post["author_id"],
                    "handle": f"handle{i}",
                    "follower_count": rng.randrange(0, 100_000),
                },
            }
        else:
            message = post
        lines.append(json.dumps(message, ensure_ascii=False))
        ids.append(post_id)
    # Malformed lines: rejected (and reported) by `grebe ingest`.
    lines.insert(50, '{"id": "broken-1", "author_id": "user-001", "text": "unterminated')
    lines.insert(120, "this is not json at all")
    # Valid JSON, but not a post: the pipeline dead-letters them with a reason.
    lines.insert(80, json.dumps({"id": 12345, "text": "id should be a string"}))
    lines.insert(160, json.dumps({"post": {"text": "no id or author"}}))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} lines to {OUT}")


if __name__ == "__main__":
    main()
