"""Every flow's plan, and `build_bundle(config)`: the default `plans.factory`.

The bundle holds the enabled plans and one FlowServices; its components (store, output
producer, models, media pipeline) are constructed here but start — load weights, open
files and connections — only in the bundle's start(), inside the engine process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from grebe import constants as C
from grebe.core.bundle import PlanBundle
from grebe.core.memo import SharedCache
from grebe.core.plan import Plan
from grebe.flows import banger, embeddings, multimodal, ptos, replies, safety, spam
from grebe.flows.coordination import CoordinationIndex
from grebe.flows.enforcement import EnforcementHistory
from grebe.flows.llm import PromptBook
from grebe.flows.services import FlowServices, PlanLimiter, RecentKeys
from grebe.flows.settings import FlowSettings
from grebe.flows.signals import AuthorMemory
from grebe.flows.sinks import FlagRecords

if TYPE_CHECKING:
    from grebe.config import GrebeConfig

#: All flows, in the order their labels are merged.
PLANS: tuple[Plan, ...] = (
    spam.PLAN,
    safety.PLAN,
    ptos.PLAN,
    banger.PLAN,
    replies.PLAN,
    embeddings.PLAN,
    embeddings.FOR_REPLY_PLAN,
    multimodal.PLAN,
    multimodal.FOR_REPLY_PLAN,
    multimodal.V4_PLAN,
)
FACTORY = C.FLOWS_PLANS_FACTORY


def enabled_plans(settings: FlowSettings) -> list[Plan]:
    return [plan for plan in PLANS if plan.name in settings.enabled]


def assemble(
    settings: FlowSettings, *, models: Any, store: Any, producer: Any = None,
    media: Any = None, output_topic: str = "annotations", rate_limit_storage: str = "memory://",
    rate_limit_namespace: str = C.DEFAULT_REDIS_NAMESPACE,
) -> FlowServices:
    """FlowServices from already-built parts (the bundle, `grebe analyze` and tests)."""
    memory = settings.author_memory
    history = settings.plan(ptos.PLAN.name).enforcement_history
    campaigns = settings.plan(spam.PLAN.name).coordination
    return FlowServices(
        settings=settings,
        embedder=models.embedder,
        offensive=models.offensive,
        hate=models.hate,
        spam_head=models.spam_head,
        language=models.language,
        chat=models.chat,
        store=store,
        producer=producer,
        media=media,
        output_topic=output_topic,
        cache=SharedCache(maxsize=settings.shared_cache.maxsize, ttl_s=settings.shared_cache.ttl_s),
        authors=AuthorMemory(authors=memory.authors, texts_per_author=memory.texts_per_author,
                             window_s=memory.window_s),
        prompts=PromptBook(settings.prompts_dir),
        limiter=PlanLimiter(rate_limit_storage, rate_limit_namespace),
        dedupe=RecentKeys(max_ttl_s=max(
            (settings.plan(p.name).dedupe_ttl_s for p in PLANS), default=1.0) or 1.0),
        plan_versions={plan.name: plan.version for plan in PLANS},
        heads=getattr(models, "heads", None),
        enforcement=EnforcementHistory(store, entries_per_author=history.entries_per_author,
                                       window_s=history.window_s),
        records=FlagRecords(store),
        coordination=CoordinationIndex(max_entries=campaigns.max_entries,
                                       window_s=campaigns.window_s,
                                       max_distance=campaigns.max_distance),
    )


def lifecycles(components: Sequence[Any]) -> list[Any]:
    """Each component with a start()/stop() once, in order (a model may serve twice)."""
    seen: list[Any] = []
    for component in components:
        if not (hasattr(component, "start") and hasattr(component, "stop")):
            continue
        if all(component is not s for s in seen):
            seen.append(component)
    return seen


def build_bundle(config: GrebeConfig) -> PlanBundle:
    from grebe.brokers.factory import build_producer
    from grebe.core.ratelimit import limiter_uri
    from grebe.flows.models import build_media, build_models
    from grebe.stores.factory import build_store

    settings = FlowSettings.from_section(config.plans)
    plans = enabled_plans(settings)
    models = build_models(config, settings)
    media = build_media(config, models)
    store = build_store(config)
    producer = build_producer(config)
    limiter = limiter_uri(config.rate_limits.storage, config.redis.url)
    services = assemble(settings, models=models, store=store, producer=producer, media=media,
                        output_topic=config.output.topic, rate_limit_storage=limiter,
                        rate_limit_namespace=config.redis.namespace)
    components = lifecycles([store, producer, *models.components(), media])
    return PlanBundle(plans=plans, services=services, components=components)
