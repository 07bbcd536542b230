"""Each plan's DAG shape: task names, dependencies and eligibility, as declared."""

from __future__ import annotations

import pytest

from grebe.flows import (
    banger,
    catalog,
    embeddings,
    multimodal,
    ptos,
    registry,
    replies,
    safety,
    spam,
)

HEAD = {"rate_limit": ("filter",)}

SHAPES = {
    spam.PLAN: {"reply_filter": ("filter",), "rate_limit": ("reply_filter",),
                "media": ("rate_limit",), "head": ("media",), "offensive": ("media",),
                "signals": ("media",), "coordination": ("media",),
                "classify": ("head", "offensive", "signals", "coordination"),
                "sink": ("classify",)},
    safety.PLAN: {**HEAD, "media": ("rate_limit",), "post_text": ("rate_limit",),
                  "media_text": ("media",), "classify": ("post_text", "media_text"),
                  "sink": ("classify",)},
    ptos.PLAN: {**HEAD, "media": ("rate_limit",), "spam": ("media",), "toxicity": ("media",),
                "categories": ("spam", "toxicity"), "cross_check": ("categories",),
                "policy": ("cross_check",),
                "sink": ("policy",)},
    banger.PLAN: {**HEAD, "media": ("rate_limit",), "embedding": ("rate_limit",),
                  "topics": ("embedding",), "penalties": ("embedding",),
                  "score": ("media", "topics", "penalties"), "sink": ("score",)},
    replies.PLAN: {**HEAD, "parent": ("rate_limit",), "media": ("parent",),
                   "relevance": ("media",), "toxicity": ("media",), "spam": ("media",),
                   "rank": ("relevance", "toxicity", "spam"), "sink": ("rank",)},
    embeddings.PLAN: {**HEAD, "media": ("rate_limit",), "summary": ("media",),
                      "embedding": ("summary",), "sink": ("embedding",)},
    embeddings.FOR_REPLY_PLAN: {**HEAD, "parent": ("rate_limit",), "media": ("parent",),
                                "embedding": ("media",), "summary": ("media",),
                                "sink": ("embedding", "summary")},
    multimodal.PLAN: {**HEAD, "media": ("rate_limit",), "parts": ("media",),
                      "embedding": ("parts",), "sink": ("embedding",)},
    multimodal.FOR_REPLY_PLAN: {**HEAD, "parent": ("rate_limit",), "media": ("parent",),
                                "parts": ("media",), "embedding": ("parts",),
                                "sink": ("embedding",)},
    multimodal.V4_PLAN: {**HEAD, "media": ("rate_limit",), "parts": ("media",),
                         "embedding": ("parts",), "sink": ("embedding",)},
}


@pytest.mark.parametrize("plan", list(SHAPES), ids=lambda p: p.name)
def test_plan_shape(plan) -> None:
    expected = {"filter": (), **SHAPES[plan]}
    assert set(plan.task_names) == set(expected)
    assert dict(plan.deps) == expected
    assert plan.eligibility == plan.name
    order = plan.topological_order
    # The rate limit comes before any model (a cheap reply filter may come before it).
    assert order[0] == "filter" and order[-1] == "sink"
    assert order[1] == "rate_limit" or tuple(order[1:3]) == ("reply_filter", "rate_limit")


#: The shipped plans in the order their labels merge (the order before the catalog).
MERGE_ORDER = ("spam_comment", "post_safety", "safety_ptos", "banger_initial_screen",
               "reply_ranking", "post_embedding_with_summary",
               "post_embedding_with_summary_for_reply", "mm_emb_v5", "mm_emb_v5_for_reply",
               "mm_emb_v4")


def test_every_declared_flow_has_exactly_one_plan_in_merge_order() -> None:
    assert tuple(p.name for p in registry.PLANS) == MERGE_ORDER
    assert catalog.eligibilities() == frozenset(MERGE_ORDER)
    assert set(SHAPES) == set(registry.PLANS)


def test_versions() -> None:
    assert multimodal.PLAN.version == "5" and multimodal.V4_PLAN.version == "4"
    assert spam.PLAN.version == "1"


def test_default_config_streams_reach_every_plan() -> None:
    from importlib import resources

    from grebe.config import load_config
    from grebe.flows.settings import FlowSettings

    path = resources.files("grebe") / "data" / "default.yaml"
    config = load_config(str(path))
    # Grox's sixteen generators plus grebe's additions (tests/selection/test_generators.py)
    assert len(config.streams) > 16
    reachable = {e for s in config.streams for e in s.eligibilities}
    assert reachable == {p.eligibility for p in registry.PLANS}
    assert config.plans["factory"] == registry.FACTORY
    settings = FlowSettings.from_section(config.plans)
    # thresholds live in the versioned policy file, not here: the version is the file's
    assert "+config." not in settings.policy_version


def test_build_bundle_constructs_without_starting(tmp_path) -> None:
    from grebe.app.bundles import build_bundle
    from grebe.config import load_config

    config = load_config(data_dir=tmp_path, plans={
        "factory": registry.FACTORY, "enabled": ["spam_comment", "mm_emb_v4"]})
    bundle = build_bundle(config)
    assert [p.name for p in bundle.plans] == ["spam_comment", "mm_emb_v4"]
    assert bundle.services.plan_versions["mm_emb_v4"] == "4"
    names = [type(c).__name__ for c in bundle.components]
    assert names[0] == "SqliteStore" and names[-2:] == ["LazyMediaHydrator", "CachedLoader"]
    assert names[2] == "StartTogether"  # the models every text post needs, in parallel
    loaded_at_start = [type(p).__name__ for p in bundle.components[2].parts]
    assert "MiniLMEmbedder" in loaded_at_start and "HeadsService" in loaded_at_start
    assert "LazySpamScorer" in names  # the heads judge spam: the e-mail head is a fallback
    assert not (tmp_path / "annotations.db").exists()  # nothing opened before start()
