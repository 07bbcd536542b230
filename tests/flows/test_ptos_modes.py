"""PTOS reads the stream's mode where Grox does (grebe.flows.modes): the annotation
names the pass, deluxe passes dedupe apart from realtime ones, and deluxe rechecks
popular media posts for adult content."""

from __future__ import annotations

from typing import Any

import msgspec

from grebe.core.planmaster import PlanMaster
from grebe.flows import registry
from grebe.flows.services import FlowServices, MediaFacts
from grebe.types import Media, TaskStatus

from .conftest import fake_services, payload

PTOS = frozenset({"safety_ptos"})
IMAGE = (Media(kind="image", url="https://img.example/a.jpg"),)
HARMLESS = "Lovely sunset at the beach today, the sky went pink and orange"


async def run(services: FlowServices, mode: str, **post: Any) -> Any:
    post.setdefault("lang", "en")
    task = msgspec.structs.replace(payload(HARMLESS, eligibilities=PTOS, **post), mode=mode)
    [result] = await PlanMaster(registry.PLANS, services=services).run_plans(task)
    return result


async def test_the_annotation_names_the_mode_of_its_pass() -> None:
    services = fake_services({"defaults": {"dedupe_ttl_s": 0}})
    for mode in ("realtime", "recovery", "deluxe"):
        result = await run(services, mode)
        assert result.status == TaskStatus.SUCCESS, result.error
        assert result.output.reasons["ptos.mode"] == mode


async def test_a_deluxe_pass_is_not_deduped_by_the_realtime_one() -> None:
    services = fake_services()  # dedupe on (600 s by default)
    assert (await run(services, "realtime")).status == TaskStatus.SUCCESS
    assert (await run(services, "realtime")).status == TaskStatus.SKIPPED
    assert (await run(services, "deluxe")).status == TaskStatus.SUCCESS
    assert (await run(services, "deluxe")).status == TaskStatus.SKIPPED


async def test_deluxe_rechecks_popular_media_posts_for_adult_content() -> None:
    services = fake_services({"defaults": {"dedupe_ttl_s": 0}},
                             facts=MediaFacts(nsfw=(0.55,), items=1))
    realtime = await run(services, "realtime", media=IMAGE, like_count=500)
    assert "sexual" not in realtime.output.labels  # 0.55 is under the usual 0.7
    deluxe = await run(services, "deluxe", media=IMAGE, like_count=500)
    assert "sexual" in deluxe.output.labels
    assert deluxe.output.reasons["ptos.sexual"].startswith("deluxe recheck (128+ likes")
    unpopular = await run(services, "deluxe", media=IMAGE, like_count=20)
    assert "sexual" not in unpopular.output.labels
