"""`grebe analyze`: one post through every flow it is eligible for, in this process,
with the configured models; nothing is written to the store or the output topic."""

from __future__ import annotations

import dataclasses

from grebe.config import GrebeConfig
from grebe.core.bundle import PlanBundle
from grebe.core.plan import PlanResult
from grebe.core.planmaster import PlanMaster
from grebe.errors import GrebeError
from grebe.flows.registry import assemble, enabled_plans, lifecycles
from grebe.flows.services import RecentKeys
from grebe.flows.settings import FlowSettings
from grebe.stores.base import MemoryStore
from grebe.types import Annotation, TaskPayload


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
