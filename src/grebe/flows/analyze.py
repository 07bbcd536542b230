"""`grebe analyze`: one post through every flow it is eligible for, in this process,
with the configured models; nothing is written to the store or the output topic."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from grebe.config import GrebeConfig
from grebe.core.bundle import PlanBundle
from grebe.core.plan import PlanResult
from grebe.core.planmaster import PlanMaster
from grebe.errors import GrebeError
from grebe.flows.registry import assemble, enabled_plans, lifecycles
from grebe.flows.services import RecentKeys
from grebe.flows.settings import FlowSettings
from grebe.stores.base import MemoryStore
from grebe.types import Annotation, Media, Post, TaskPayload, UserContext

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


class Analyzer:
    """Every enabled flow with its models loaded once, for many posts: `grebe serve`'s
    /v1/analyze keeps one; `analyze()` (the CLI) uses one for a single post.

    Each run gets a fresh in-memory store and dedupe window, so analysing the same post
    id twice analyses it twice and nothing is written anywhere; the content cache is
    shared, so a repeated text or image is not recomputed."""

    def __init__(self, config: GrebeConfig, *, media: bool = True) -> None:
        self.config = config
        self.settings = FlowSettings.from_section(config.plans)
        self.plans = enabled_plans(self.settings)
        for plan in self.plans:  # as build_bundle does for the pipeline
            plan.apply_default_timeout(config.engine.task_timeout_s)
        self._media = media
        self._bundle: PlanBundle | None = None

    @property
    def plan_names(self) -> list[str]:
        return [p.name for p in self.plans]

    async def start(self) -> None:
        """Build and start the models (and the media pipeline): this loads weights."""
        from grebe.flows.models import build_media, build_models

        models = build_models(self.config, self.settings)
        media = build_media(self.config, models) if self._media else None
        self._bundle = PlanBundle(
            plans=self.plans,
            services=assemble(self.settings, models=models, store=MemoryStore(), media=media),
            components=lifecycles([*models.components(), media]),
        )
        try:
            await self._bundle.start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        bundle, self._bundle = self._bundle, None
        if bundle is not None:
            await bundle.stop()

    async def run(self, payload: TaskPayload) -> tuple[list[PlanResult], list[Annotation]]:
        """Every eligible plan on `payload`: the plan results and the annotations their
        sinks wrote (what the pipeline would have stored)."""
        if self._bundle is None:
            raise GrebeError("the analyzer is not started")
        services = dataclasses.replace(self._bundle.services, store=MemoryStore(),
                                       dedupe=RecentKeys())
        results = await PlanMaster(self.plans, services=services).run_plans(payload)
        return results, await services.store.get(payload.post.id)


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
