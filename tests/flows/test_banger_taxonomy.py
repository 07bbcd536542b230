"""Banger taxonomy (topic -> category labels, every topic must have one) and boolean
metadata applied to the post's record."""

from __future__ import annotations

import pytest

from grebe.core.planmaster import PlanMaster
from grebe.errors import ConfigError
from grebe.flows import registry
from grebe.flows.services import MediaFacts
from grebe.flows.settings import FlowSettings
from grebe.flows.sinks import POST_RECORD
from grebe.types import Media

from .conftest import fake_services, payload

PLAN = frozenset({"banger_initial_screen"})


async def test_categories_and_boolean_metadata() -> None:
    facts = MediaFacts(ocr_text="FINAL SCORE 3-1", items=1)
    services = fake_services(facts=facts)
    post = payload("football match tonight: the team won the championship goal after goal "
                   "https://scores.example/final", eligibilities=PLAN,
                   media=(Media(kind="image", url="https://img.example/1.jpg"),))
    [result] = await PlanMaster(registry.PLANS, services=services).run_plans(post)
    labels = result.output.labels
    assert "topic:sports" in labels and "category:sports" in labels
    assert {"meta:has_image", "meta:has_media_text", "meta:has_link"} <= set(labels)
    assert "meta:has_video" not in labels and "meta:has_speech" not in labels
    [record] = [a for a in await services.store.get("p1") if a.producer == POST_RECORD]
    assert {"meta:has_image", "meta:has_media_text", "meta:has_link"} <= set(record.labels)


async def test_unchecked_media_is_not_metadata() -> None:
    services = fake_services(facts=MediaFacts(unchecked=("https://img.example/1.jpg: 404",)))
    post = payload("a picture", eligibilities=PLAN,
                   media=(Media(kind="image", url="https://img.example/1.jpg"),))
    [result] = await PlanMaster(registry.PLANS, services=services).run_plans(post)
    assert "meta:has_image" not in result.output.labels


def test_a_topic_without_a_category_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"topics \['gardening'\] have no category"):
        FlowSettings.from_section({"banger_initial_screen": {
            "topics": {"gardening": "roses tulips soil seeds"}}})
