"""Replies whose parent arrives later, and posts dated in the future (issue 13)."""

from __future__ import annotations

from grebe.thunder.events import PostCreate, PostDelete
from grebe.thunder.metrics import ThunderMetrics
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import InNetworkQuery, ThunderStore

NOW = 1_700_000_000.0


def make_store(**settings: object) -> ThunderStore:
    return ThunderStore(ThunderSettings(**settings), clock=lambda: NOW)  # type: ignore[arg-type]


def ids(store: ThunderStore, following: list[str]) -> list[str]:
    query = InNetworkQuery(user_id="viewer", following_user_ids=following)
    return [p.post_id for p in store.get_in_network_posts(query).posts]


def reply(pid: str, author: str, parent: str, age_s: float = 0.0) -> PostCreate:
    # As the posts stream gives it: only the parent's id, no authors, no conversation.
    return PostCreate(post_id=pid, author_id=author, created_at=NOW - age_s,
                      in_reply_to_post_id=parent)


def test_a_reply_whose_parent_arrives_later_is_served_once_it_does() -> None:
    store = make_store()
    store.apply(reply("r1", "bob", parent="root"))  # the parent is on another partition
    assert ids(store, ["alice", "bob"]) == []  # unknown context: the reply rule refuses it
    assert store.pending_count == 1
    store.apply(PostCreate(post_id="root", author_id="alice", created_at=NOW - 60,
                           conversation_id="root"))
    assert ids(store, ["alice", "bob"]) == ["r1", "root"]
    record = store.get("r1")
    assert record is not None
    assert record.in_reply_to_author_id == "alice"
    assert record.conversation_author_id == "alice" and record.conversation_id == "root"
    assert store.pending_count == 0 and store.resolved_replies == 1
    # The rule still holds with the context filled: alice is not followed here.
    assert ids(store, ["bob"]) == []


def test_a_chain_that_arrives_backwards_is_resolved_to_its_root() -> None:
    store = make_store()
    store.apply(reply("r2", "carol", parent="r1"))
    store.apply(reply("r1", "bob", parent="root", age_s=1))
    store.apply(PostCreate(post_id="root", author_id="alice", created_at=NOW - 2))
    assert ids(store, ["alice", "bob", "carol"]) == ["r2", "r1", "root"]
    assert store.get("r2").conversation_author_id == "alice"  # type: ignore[union-attr]


def test_waiting_replies_are_bounded_and_a_deleted_one_is_not_revived() -> None:
    store = make_store(max_pending_replies=2)
    for i in range(3):
        store.apply(reply(f"r{i}", "bob", parent=f"missing{i}"))
    assert store.pending_count == 2 and "missing0" not in store.pending_replies
    store.apply(PostDelete(post_id="r2"))
    store.apply(PostCreate(post_id="missing2", author_id="alice", created_at=NOW - 5))
    assert "r2" not in store and store.resolved_replies == 0
    assert store.pending_count == 1


def test_waiting_replies_expire_with_retention() -> None:
    store = make_store(retention_s=100)
    store.apply(reply("r1", "bob", parent="gone", age_s=50))
    store.trim(now=NOW + 60)
    assert store.pending_count == 0 and not store.pending_replies


def test_a_future_dated_post_is_refused_and_does_not_pin_freshness() -> None:
    store = make_store(max_future_skew_s=300)
    metrics = ThunderMetrics()
    metrics.watch_store(store)
    assert store.apply(PostCreate(post_id="now", author_id="a", created_at=NOW - 10))
    assert not store.apply(PostCreate(post_id="soon", author_id="a", created_at=NOW + 3600))
    assert store.apply(PostCreate(post_id="skewed", author_id="a", created_at=NOW + 200))
    assert "soon" not in store and ids(store, ["a"]) == ["skewed", "now"]
    assert store.newest_created_at == NOW + 200
    assert store.future_refused == 1
    assert metrics.registry.get_sample_value("grebe_thunder_future_posts_refused") == 1
    # apply_many (the ingest path) refuses it too.
    assert store.apply_many([PostCreate(post_id="x", author_id="a", created_at=NOW + 1e6)]) == 0
    assert store.future_refused == 2
