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


async def test_topic_centroids_come_from_the_shared_cache_not_the_payload_memo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The configured topics' embeddings are the same for every post: one cache entry
    # each, read by every post, and no payload memo task per topic per post.
    from grebe.core.memo import PayloadMemo
    from grebe.flows import shared

    memo_keys: list[str] = []
    get_or_compute = PayloadMemo.get_or_compute

    def spy(self: PayloadMemo, key: str, factory: object) -> object:
        memo_keys.append(key)
        return get_or_compute(self, key, factory)  # type: ignore[arg-type]

    monkeypatch.setattr(PayloadMemo, "get_or_compute", spy)
    adopt = PayloadMemo.adopt

    def spy_adopt(self: PayloadMemo, key: str, start: object) -> object:
        memo_keys.append(key)
        return adopt(self, key, start)  # type: ignore[arg-type]

    monkeypatch.setattr(PayloadMemo, "adopt", spy_adopt)
    services = fake_services({"defaults": {"dedupe_ttl_s": 0}})
    topics = services.settings.plan("banger_initial_screen").topics
    embedder = services.models.embedder
    for n in range(2):
        (result,) = await PlanMaster(registry.PLANS, services=services).run_plans(
            payload(f"{TEXT} {n}", eligibilities=BANGER, post_id=f"p{n}"))
        assert result.status.value == "success", result.error
        assert result.output.model_versions["embedder"] == embedder.name
    topic_keys = {f"{shared.KEY_EMBED}:{shared.digest(d)}" for d in topics.values()}
    assert topic_keys and not topic_keys & set(memo_keys)
    for description in topics.values():
        cached = services.cache.get(f"{shared.KEY_EMBED}:{shared.digest(description)}")
        expected = (await embedder.embed_parts(description, ())).vector
        assert (cached.vector == expected).all()  # the entry `shared.encoded` would make


async def test_topics_are_scored_with_one_cached_centroid_matrix() -> None:
    """One cache entry holds every topic's centroid, in order, and a post's topic scores
    are its cosines with them."""
    import numpy as np

    from grebe.flows import shared

    services = fake_services({"defaults": {"dedupe_ttl_s": 0}})
    settings = services.settings.plan("banger_initial_screen")
    settings.topic_threshold = -1.0  # every topic tagged, to compare every score
    (result,) = await PlanMaster(registry.PLANS, services=services).run_plans(
        payload(TEXT, eligibilities=BANGER))
    matrix = services.cache.get((shared.KEY_CONFIGURED_ROWS, tuple(settings.topics.values())))
    assert matrix is not None and matrix.shape[0] == len(settings.topics)
    post = (await services.models.embedder.embed_parts(TEXT, ())).vector
    for row, (name, description) in zip(matrix, settings.topics.items(), strict=True):
        centroid = (await services.models.embedder.embed_parts(description, ())).vector
        assert np.allclose(row, centroid)
        assert result.output.scores[f"topic:{name}"] == pytest.approx(
            round(shared.cosine(post, centroid), 4), abs=1e-4)
