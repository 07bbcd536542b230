"""The banger screen needs engagement counts: with them a text-only post can be a
candidate; without them (or with media alone) it never is."""

from __future__ import annotations

import pytest

from grebe.core.planmaster import PlanMaster
from grebe.flows import registry
from grebe.types import Media

from .conftest import fake_services, payload

TEXT = "Just finished a ten mile trail run up the ridge and the sunrise was unreal today"
BANGER = frozenset({"banger_initial_screen"})


async def screen(**post) -> tuple[list[str], str]:
    services = fake_services({"defaults": {"dedupe_ttl_s": 0}})
    (result,) = await PlanMaster(registry.PLANS, services=services).run_plans(
        payload(TEXT, eligibilities=BANGER, **post))
    return result.output.labels, result.output.reasons["quality"]


@pytest.mark.parametrize(("post", "candidate"), [
    ({"view_count": 1000, "like_count": 40, "repost_count": 5, "reply_count": 3}, True),
    ({"view_count": 1000, "like_count": 1}, False),  # seen, but nobody cared
    ({}, False),  # no counts: not judged a candidate
])
async def test_text_only_posts_with_engagement(post: dict, candidate: bool) -> None:
    labels, reason = await screen(**post)
    assert ("banger_candidate" in labels) is candidate, reason


async def test_media_without_engagement_is_not_a_candidate() -> None:
    # before: shape 1.0 * 0.5 + media 0.15 = 0.65 >= 0.6 for any photo post
    labels, reason = await screen(media=(Media(kind="image", url="https://x/1.jpg"),))
    assert "banger_candidate" not in labels
    assert "needs engagement counts" in reason
