"""`grebe analyze`: one post through every flow it is eligible for, in this process,
with the configured models; nothing is written to the store or the output topic."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from grebe.config import GrebeConfig
from grebe.core.plan import PlanResult
from grebe.core.planmaster import PlanMaster
from grebe.flows.registry import assemble, enabled_plans
from grebe.flows.settings import FlowSettings
from grebe.stores.base import MemoryStore
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
    from grebe.flows.models import build_media, build_models

    settings = FlowSettings.from_section(config.plans)
    plans = enabled_plans(settings)
    payload, roots = build_payload(text, images=images or [], videos=videos or [],
                                   reply_to=reply_to, plans=[p.name for p in plans])
    if roots:  # the user named these files: let the fetcher read them, and only them
        media_section: dict[str, Any] = dict(config.media)
        fetch = dict(media_section.get("fetch", {}))
        fetch["allow_files"] = True
        fetch["file_roots"] = [*fetch.get("file_roots", []), *map(str, roots)]
        media_section["fetch"] = fetch
        config = config.model_copy(update={"media": media_section})
    models = build_models(config, settings)
    media = build_media(config, models) if payload.post.media else None
    services = assemble(settings, models=models, store=MemoryStore(), media=media)
    components = [c for c in (*models.components(), media) if hasattr(c, "start")]
    started = []
    try:
        for component in components:
            await component.start()
            started.append(component)
        return await PlanMaster(plans, services=services).run_plans(payload)
    finally:
        for component in reversed(started):
            await component.stop()
