"""The built-in plans: `noop` (the runtime benchmark) and `basic` (text statistics).

    noop   (eligibility "noop"):  parse -> (left, right) -> join -> score -> done
    basic  (eligibility "basic"): filter -> stats -> sink

`basic` skips posts without text, computes cheap text statistics (length, words, links,
a "shouting" score: the share of upper-case letters outside links; the rules of
grebe.flows.text_signals, as the flows read them) and its sink (grebe.flows.sinks)
writes one Annotation(producer="basic") to the annotation store, then publishes it to the output
topic. The store write is an upsert, so a post processed twice still has one row.

Thresholds come from `plans.basic` in the configuration (`BasicSettings`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from grebe import constants as C
from grebe.brokers.factory import build_producer
from grebe.config import GrebeConfig
from grebe.core.bundle import Lifecycle, PlanBundle
from grebe.core.plan import Plan
from grebe.core.source import Producer
from grebe.core.task import SKIP, TaskContext
from grebe.errors import ConfigError
from grebe.flows import text_signals
from grebe.flows.sinks import write_annotation
from grebe.stores.base import AnnotationStore
from grebe.stores.factory import build_store

PRODUCER = "basic"
VERSION = "1"
LABEL_HAS_LINK = "has_link"
LABEL_SHOUTING = "shouting"
SCORE_SHOUTING = "basic.shouting"
SCORE_LENGTH = "basic.length"
SCORE_WORDS = "basic.words"


class BasicSettings(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    shouting_threshold: float = 0.7  # share of upper-case letters that reads as shouting
    shouting_min_letters: int = 8  # "OK" is not shouting


@dataclass
class BasicServices:
    """What the basic plan's tasks use: where annotations go."""

    store: AnnotationStore
    producer: Producer | None
    output_topic: str
    settings: BasicSettings


# --- noop -----------------------------------------------------------------------------------


async def _noop(ctx: TaskContext) -> None:
    return None


def noop_plan() -> Plan:
    """Six no-op tasks in a diamond then a chain: the runtime's own cost per post."""
    return Plan(
        "noop",
        {name: _noop for name in ("parse", "left", "right", "join", "score", "done")},
        {
            "left": ["parse"], "right": ["parse"], "join": ["left", "right"],
            "score": ["join"], "done": ["score"],
        },
        eligibility=C.NOOP_ELIGIBILITY,
    )


# --- basic ----------------------------------------------------------------------------------


async def filter_text(ctx: TaskContext) -> Any:
    text = ctx.payload.post.text
    return text if text.strip() else SKIP


async def text_stats(ctx: TaskContext) -> dict[str, float]:
    settings: BasicSettings = ctx.services.settings
    text: str = ctx.results["filter"]
    shouting = text_signals.shouting(text, settings.shouting_min_letters)
    output = ctx.output
    output.scores[SCORE_LENGTH] = float(len(text))
    output.scores[SCORE_WORDS] = float(len(text.split()))
    output.scores[SCORE_SHOUTING] = round(shouting, 4)
    if text_signals.count_links(text):
        output.labels.append(LABEL_HAS_LINK)
    if shouting >= settings.shouting_threshold:
        output.labels.append(LABEL_SHOUTING)
        output.reasons[LABEL_SHOUTING] = (
            f"{shouting:.0%} of letters are upper case (>= {settings.shouting_threshold:.0%})"
        )
    return dict(output.scores)


async def sink(ctx: TaskContext) -> None:
    services: BasicServices = ctx.services
    await write_annotation(ctx, store=services.store, producer=PRODUCER, version=VERSION,
                           publisher=services.producer, topic=services.output_topic)


def basic_plan() -> Plan:
    return Plan(
        "basic",
        {"filter": filter_text, "stats": text_stats, "sink": sink},
        {"stats": ["filter"], "sink": ["stats"]},
        eligibility=C.BASIC_ELIGIBILITY,
        version=VERSION,
    )


def build_bundle(config: GrebeConfig) -> PlanBundle:
    """The default plans factory (`plans.factory`)."""
    try:
        settings = msgspec.convert(config.plans.get("basic", {}), BasicSettings)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"plans.basic: {exc}") from exc
    store = build_store(config)
    producer = build_producer(config)
    services = BasicServices(store, producer, config.output.topic, settings)
    components: list[Lifecycle] = [store] if producer is None else [store, producer]
    return PlanBundle(plans=[noop_plan(), basic_plan()], services=services, components=components)
