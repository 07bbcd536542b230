"""Sink rules declared per plan: output topic or not (post_safety never, mm_emb_v5 not
for replies), flags OR-merged into the post and author records."""

from __future__ import annotations

import msgspec
import numpy as np

from grebe import codec
from grebe.core.planmaster import PlanMaster
from grebe.flows import registry
from grebe.flows.services import MediaFacts
from grebe.flows.sinks import POST_RECORD, USER_RECORD, FlagRecords, SinkRules
from grebe.stores.base import MemoryStore
from grebe.types import Media

from .conftest import fake_services, payload

NO_DEDUPE = {"defaults": {"dedupe_ttl_s": 0}}
IMAGE = (Media(kind="image", url="https://img.example/a.jpg"),)


def published_plans(services) -> list[tuple[str, str]]:
    rows = [codec.decode_annotation(v) for _, _, v in services.producer.published]
    return [(a.post_id, a.producer) for a in rows]


async def record(services, producer: str, key: str) -> list[str]:
    rows = [a for a in await services.store.get(key) if a.producer == producer]
    return rows[0].labels if rows else []


async def test_post_safety_is_stored_not_published_and_flags_the_post_record() -> None:
    services = fake_services(NO_DEDUPE, facts=MediaFacts(nsfw=(0.97,), items=1))
    master = PlanMaster(registry.PLANS, services=services)
    await master.run(payload("sunset", eligibilities=frozenset({"post_safety"}), media=IMAGE))
    assert [a.producer for a in await services.store.get("p1")] == ["post_safety", POST_RECORD]
    assert services.producer.published == []
    assert await record(services, POST_RECORD, "p1") == ["nsfw"]


async def test_mm_emb_v5_publishes_originals_but_not_replies() -> None:
    services = fake_services(NO_DEDUPE)
    master = PlanMaster(registry.PLANS, services=services)
    v5 = frozenset({"mm_emb_v5"})
    await master.run(payload("an original post", eligibilities=v5, post_id="o1"))
    await master.run(payload("a reply to it", eligibilities=v5, post_id="r1",
                             parent="an original post"))
    assert published_plans(services) == [("o1", "mm_emb_v5")]
    assert {a.producer for a in await services.store.get("r1")} == {"mm_emb_v5"}


async def test_the_published_embedding_is_int8_and_decodes_to_the_stored_floats() -> None:
    services = fake_services(NO_DEDUPE)
    master = PlanMaster(registry.PLANS, services=services)
    await master.run(payload("an original post", eligibilities=frozenset({"mm_emb_v5"})))
    [(_, _, raw)] = services.producer.published
    wire = msgspec.json.decode(raw)["embedding"]
    assert wire["dtype"] == "i8" and isinstance(wire["data"], str) and wire["scale"] > 0
    [stored] = await services.store.get("p1")
    published = codec.decode_annotation(raw)
    assert stored.embedding is not None and published.embedding is not None
    assert wire["dims"] == len(published.embedding) == len(stored.embedding)
    scale = max(abs(x) for x in stored.embedding) / 127
    assert np.allclose(published.embedding, stored.embedding, atol=scale / 2 + 1e-7)


async def test_flags_of_several_plans_are_or_merged_and_never_cleared() -> None:
    services = fake_services(NO_DEDUPE, facts=MediaFacts(nsfw=(0.97,), items=1))
    master = PlanMaster(registry.PLANS, services=services)
    both = frozenset({"spam_comment", "post_safety"})
    await master.run(payload("buy cheap pills now click here free money offer",
                             eligibilities=both, media=IMAGE, lang="en"))
    assert await record(services, POST_RECORD, "p1") == ["nsfw", "spam"]
    records = services.records
    assert await records.merge(POST_RECORD, "p1", set(), "x") == {"nsfw", "spam"}
    assert await records.merge(POST_RECORD, "p1", {"hate"}, "x") == {"hate", "nsfw", "spam"}


async def test_coordinated_campaign_flags_the_authors_records() -> None:
    services = fake_services(NO_DEDUPE)
    master = PlanMaster(registry.PLANS, services=services)
    for n in range(6):
        await master.run(payload(f"Win a free phone today, visit https://x{n}.example now",
                                 eligibilities=frozenset({"spam_comment"}), post_id=f"c{n}",
                                 author=f"acct{n}", lang="en"))
    assert await record(services, USER_RECORD, "user:acct5") == ["coordinated_spam"]
    assert await record(services, USER_RECORD, "user:acct0") == []  # before the 5th account
    assert "coordinated_spam" in await record(services, POST_RECORD, "c5")


async def test_concurrent_merges_lose_no_flag() -> None:
    import asyncio

    records = FlagRecords(MemoryStore())
    flags = [f"flag{i}" for i in range(20)]
    await asyncio.gather(*(records.merge(POST_RECORD, "p", {f}, "plan") for f in flags))
    assert await records.flags(POST_RECORD, "p") == set(flags)


def test_rules_publish_decision() -> None:
    assert SinkRules().publishes(is_reply=True)
    assert not SinkRules(publish=False).publishes(is_reply=False)
    assert SinkRules(publish_replies=False).publishes(is_reply=False)
    assert not SinkRules(publish_replies=False).publishes(is_reply=True)


def test_a_posts_fingerprint_is_computed_once_and_bounded(monkeypatch) -> None:
    """sinks.fingerprint_of: one post_fingerprint per post however many plans write an
    annotation of it; other posts get their own; the memo stays bounded."""
    from grebe.flows import sinks
    from grebe.types import Post, post_fingerprint

    computed: list[str] = []

    def counting(post: Post) -> str:
        computed.append(post.id)
        return post_fingerprint(post)

    monkeypatch.setattr(sinks, "post_fingerprint", counting)
    first, other = Post(id="f1", text="one"), Post(id="f1", text="another text")
    assert [sinks.fingerprint_of(first) for _ in range(6)] == [post_fingerprint(first)] * 6
    assert sinks.fingerprint_of(other) == post_fingerprint(other) != post_fingerprint(first)
    assert computed == ["f1", "f1"]
    for i in range(sinks.RECENT_FINGERPRINTS + 10):
        sinks.fingerprint_of(Post(id=f"p{i}", text="x"))
    assert len(sinks._fingerprints) <= sinks.RECENT_FINGERPRINTS
