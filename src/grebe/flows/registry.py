"""Every flow's plan, and `build_bundle(config)`: the default `plans.factory`.

The flows are those the modules declare (grebe.flows.catalog); nothing here lists them.

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
from grebe.core.peers import Peers, SharesWithPeers
from grebe.core.plan import Plan
from grebe.errors import ConfigError
from grebe.flows import catalog
from grebe.flows.author_memory import AuthorMemory
from grebe.flows.llm import PromptBook
from grebe.flows.services import FlowServices, PlanLimiter, RecentKeys
from grebe.flows.settings import FlowSettings
from grebe.flows.sinks import FlagRecords
from grebe.inference.base import Service

if TYPE_CHECKING:
    from grebe.config import GrebeConfig
    from grebe.flows.models import FlowModels
    from grebe.inference.settings import ChatConfig

FACTORY = C.FLOWS_PLANS_FACTORY


def all_plans() -> tuple[Plan, ...]:
    """Every declared flow's plan, in the order their labels are merged."""
    return tuple(flow.plan for flow in catalog.flows())


def enabled_plans(settings: FlowSettings) -> list[Plan]:
    return [plan for plan in all_plans() if plan.name in settings.enabled]


def __getattr__(name: str) -> Any:
    """`registry.PLANS`: all plans, read from the catalog when asked (a flow module added
    at run time, as a test does, is seen on the next `catalog.refresh()`)."""
    if name == "PLANS":
        return all_plans()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def assemble(
    settings: FlowSettings, *, models: FlowModels, store: Any, producer: Any = None,
    media: Any = None, output_topic: str = "annotations", rate_limit_storage: str = "memory://",
    rate_limit_namespace: str = C.DEFAULT_REDIS_NAMESPACE, engines: int = 1,
) -> FlowServices:
    """FlowServices from already-built parts (the bundle, `grebe analyze` and tests).
    `engines`: how many engine processes share the plans' `max_qps` budgets."""
    memory = settings.author_memory
    plans = all_plans()
    return FlowServices(
        settings=settings,
        models=models,
        store=store,
        producer=producer,
        media=media,
        output_topic=output_topic,
        cache=SharedCache(maxsize=settings.shared_cache.maxsize, ttl_s=settings.shared_cache.ttl_s),
        authors=AuthorMemory(authors=memory.authors, texts_per_author=memory.texts_per_author,
                             window_s=memory.window_s),
        prompts=PromptBook(settings.prompts_dir),
        limiter=PlanLimiter(rate_limit_storage, rate_limit_namespace, engines=engines),
        dedupe=RecentKeys(max_ttl_s=max(
            (settings.plan(p.name).dedupe_ttl_s for p in plans), default=1.0) or 1.0),
        plan_versions={plan.name: plan.version for plan in plans},
        records=FlagRecords(store),
        contributed=contributions(settings, store),
    )


def contributions(settings: FlowSettings, store: Any) -> dict[str, Any]:
    """Every flow's own services (`Flow.services`), by key; ConfigError if two flows
    contribute the same key (one would silently replace the other's state)."""
    found: dict[str, Any] = {}
    owner: dict[str, str] = {}
    for flow in catalog.flows():
        if flow.services is None:
            continue
        for key, service in flow.services(settings, store).items():
            if key in found:
                raise ConfigError(f"flows {owner[key]} and {flow.name} both contribute the "
                                  f"service {key!r}")
            found[key], owner[key] = service, flow.name
    return found


def lifecycles(components: Sequence[Any]) -> list[Service]:
    """Each component with a start()/stop() lifecycle once, in order (a model may serve
    twice; None, an absent optional part, has none)."""
    seen: list[Service] = []
    for component in components:
        if not isinstance(component, Service):
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
    peers = Peers()
    media = build_media(config, models, peers)
    store = build_store(config)
    producer = build_producer(config)
    limiter = limiter_uri(config.rate_limits.storage, config.redis.url)
    services = assemble(settings, models=models, store=store, producer=producer, media=media,
                        output_topic=config.output.topic, rate_limit_storage=limiter,
                        rate_limit_namespace=config.redis.namespace,
                        engines=max(1, config.engine.process_count))
    for service in services.contributed.values():
        if isinstance(service, SharesWithPeers):  # spam's coordination index
            service.share_with(peers)
    components = lifecycles([store, producer, *models.components(), media])
    llm_budget = chat_budget_s(config.inference.chat)
    floors = {p.name: llm_budget for p in plans if settings.backend(p.name) == "llm"}
    return PlanBundle(plans=plans, services=services, components=components,
                      min_task_timeout_s=floors, peers=peers)


def chat_budget_s(chat: ChatConfig) -> float:
    """The longest a chat call may take before the client itself gives up: each endpoint
    (the primary, then each fallback) tried `max_attempts` times, each attempt up to its
    `timeout_s`, with the client's longest wait between attempts (a server's Retry-After,
    capped). A task limit below it cancels calls the client would still finish."""
    from grebe.inference.openai_compat import BACKOFF_MAX_S, RETRY_AFTER_MAX_S

    wait = max(BACKOFF_MAX_S, RETRY_AFTER_MAX_S)
    tries = [(chat.timeout_s, chat.max_attempts)]
    tries += [(e.timeout_s, e.max_attempts) for e in chat.fallbacks]
    return sum(timeout * attempts + wait * (attempts - 1) for timeout, attempts in tries)
