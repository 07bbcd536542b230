"""`grebe analyze`: one post, typed on the command line, through the flows' Analyzer.

The Analyzer itself is product (grebe.flows.analyze: `grebe serve`'s /v1/analyze keeps
one); what is here is the command's part: a post built from text, file paths and URLs,
and the fetcher allowed to read exactly the files the user named."""

from __future__ import annotations

import time
from pathlib import Path

from grebe.config import GrebeConfig
from grebe.core.plan import PlanResult
from grebe.flows.analyze import Analyzer
from grebe.flows.registry import enabled_plans
from grebe.flows.settings import FlowSettings
from grebe.types import Media, Post, TaskPayload, UserContext

ANALYZE_POST_ID = "analyze"
PARENT_POST_ID = "analyze-parent"


def media_item(kind: str, where: str) -> tuple[Media, Path | None]:
    """A Media for a URL or a local path (returned too: its folder must be allowed)."""
    if "://" in where:
        return Media(kind=kind, url=where), None  # type: ignore[arg-type]
    path = Path(where).expanduser().resolve()
    return Media(kind=kind, url=path.as_uri()), path.parent  # type: ignore[arg-type]


def build_payload(text: str, *, images: list[str], videos: list[str],
                  reply_to: str | None, plans: list[str]) -> tuple[TaskPayload, list[Path]]:
    media, roots = [], []
    for kind, items in (("image", images), ("video", videos)):
        for where in items:
            item, root = media_item(kind, where)
            media.append(item)
            if root is not None:
                roots.append(root)
    parent = Post(id=PARENT_POST_ID, author_id="parent", text=reply_to) if reply_to else None
    post = Post(id=ANALYZE_POST_ID, author_id="cli", text=text, created_at=time.time(),
                reply_to_post_id=parent.id if parent else None, media=tuple(media))
    payload = TaskPayload(payload_id=f"analyze:{time.time_ns()}", post=post,
                          context=UserContext(parent=parent), eligibilities=frozenset(plans),
                          source="analyze")
    return payload, roots


async def analyze(config: GrebeConfig, text: str, *, images: list[str] | None = None,
                  videos: list[str] | None = None, reply_to: str | None = None) -> list[PlanResult]:
    settings = FlowSettings.from_section(config.plans)
    plans = enabled_plans(settings)
    payload, roots = build_payload(text, images=images or [], videos=videos or [],
                                   reply_to=reply_to, plans=[p.name for p in plans])
    if roots:  # the user named these files: let the fetcher read them, and only them
        fetch = config.media.fetch.model_copy(update={
            "allow_files": True, "file_roots": [*config.media.fetch.file_roots, *roots]})
        media = config.media.model_copy(update={"fetch": fetch})
        config = config.model_copy(update={"media": media})
    analyzer = Analyzer(config, media=bool(payload.post.media))
    await analyzer.start()
    try:
        results, _ = await analyzer.run(payload)
        return results
    finally:
        await analyzer.stop()
