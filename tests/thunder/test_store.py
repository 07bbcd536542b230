"""The store's rules: retention, trim, caps, deletes, video and reply eligibility."""

from __future__ import annotations

import pytest

from grebe.thunder.events import PostCreate, PostDelete, QuotedPostDelete
from grebe.thunder.settings import ThunderSettings
from grebe.thunder.store import InNetworkQuery, ThunderStore

NOW = 1_700_000_000.0
DAY = 86_400.0


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_store(**settings: object) -> tuple[ThunderStore, Clock]:
    clock = Clock()
    return ThunderStore(ThunderSettings(**settings), clock=clock), clock  # type: ignore[arg-type]


def create(pid: str, author: str, age_s: float = 0.0, **kw: object) -> PostCreate:
    return PostCreate(post_id=pid, author_id=author, created_at=NOW - age_s, **kw)  # type: ignore[arg-type]


def ids(store: ThunderStore, user: str = "viewer", following: tuple[str, ...] = (),
        **kw: object) -> list[str]:
    query = InNetworkQuery(user_id=user, following_user_ids=list(following), **kw)  # type: ignore[arg-type]
    return [p.post_id for p in store.get_in_network_posts(query).posts]


def test_newest_first_across_authors() -> None:
    store, _ = make_store()
    store.apply(create("a1", "a", age_s=30))
    store.apply(create("b1", "b", age_s=20))
    store.apply(create("a2", "a", age_s=10))
    store.apply(create("c1", "c", age_s=5))  # not followed
    assert ids(store, following=("a", "b")) == ["a2", "b1", "a1"]


def test_out_of_order_creates_are_kept_sorted() -> None:
    store, _ = make_store()
    for pid, age in [("p3", 10), ("p1", 30), ("p2", 20)]:
        store.apply(create(pid, "a", age_s=age))
    assert ids(store, following=("a",)) == ["p3", "p2", "p1"]


def test_duplicate_create_is_ignored() -> None:
    store, _ = make_store()
    assert store.apply(create("p", "a"))
    assert not store.apply(create("p", "a"))
    assert len(store) == 1
    assert ids(store, following=("a",)) == ["p"]


def test_store_cap_evicts_the_oldest_of_an_author() -> None:
    store, _ = make_store(max_originals_per_author=3, serve_originals_per_author=10)
    for i in range(5):
        store.apply(create(f"p{i}", "a", age_s=100 - i))
    assert ids(store, following=("a",)) == ["p4", "p3", "p2"]
    assert "p0" not in store and "p1" not in store  # evicted ones leave the index too
    # An out-of-order create older than everything kept is beyond the cap: ignored.
    assert not store.apply(create("old", "a", age_s=1000))
    assert len(store) == 3


def test_serve_caps_per_author_and_max_results() -> None:
    store, _ = make_store(serve_originals_per_author=2)
    for author in "abc":
        for i in range(4):
            store.apply(create(f"{author}{i}", author, age_s=100 - i))
    assert ids(store, following=("a",)) == ["a3", "a2"]
    got = ids(store, following=("a", "b", "c"), max_results=4)
    assert len(got) == 4
    assert set(got) <= {"a3", "a2", "b3", "b2", "c3", "c2"}


def test_exclude_post_ids() -> None:
    store, _ = make_store(serve_originals_per_author=2)
    for i in range(4):
        store.apply(create(f"p{i}", "a", age_s=100 - i))
    # The cap counts served posts, so excluding the newest lets an older one in.
    assert ids(store, following=("a",), exclude_post_ids={"p3"}) == ["p2", "p1"]


def test_delete_tombstones_and_ignores_late_create() -> None:
    store, _ = make_store()
    store.apply(create("p", "a", has_video=True))
    assert store.apply(PostDelete(post_id="p"))
    assert ids(store, following=("a",)) == []
    assert ids(store, following=("a",), is_video_request=True) == []
    # A redelivered or late create of a deleted post never comes back.
    assert not store.apply(create("p", "a"))
    # A delete that arrives before its create wins too.
    assert not store.apply(PostDelete(post_id="q"))
    assert not store.apply(create("q", "a"))
    assert ids(store, following=("a",)) == []


def test_quoted_delete_drops_the_quoting_post() -> None:
    store, _ = make_store()
    store.apply(create("src", "b", age_s=10))
    store.apply(create("quote", "a", quote_of_post_id="src"))
    assert ids(store, following=("a",)) == ["quote"]
    assert store.apply(QuotedPostDelete(post_id="quote", quoted_post_id="src"))
    assert ids(store, following=("a",)) == []


def test_retention_ignores_old_creates_and_trim_drops_expired() -> None:
    store, clock = make_store(retention_s=2 * DAY)
    assert not store.apply(create("ancient", "a", age_s=3 * DAY))
    store.apply(create("old", "a", age_s=1.5 * DAY))
    store.apply(create("new", "b", age_s=10))
    store.apply(PostDelete(post_id="gone"))
    assert store.author_count == 2
    clock.now += 1 * DAY  # "old" is now 2.5 days old
    assert ids(store, following=("a", "b")) == ["new", "old"]  # serving does not trim
    assert store.trim() == 1
    assert ids(store, following=("a", "b")) == ["new"]
    assert store.author_count == 1  # the author left with nothing is dropped
    assert "old" not in store
    clock.now += 3 * DAY
    assert store.trim() == 1
    assert len(store) == 0 and store.author_count == 0
    assert not store.tombstones  # expired tombstones go too


def test_video_rules() -> None:
    store, _ = make_store()
    store.apply(create("v", "a", age_s=50, has_video=True))  # original video
    store.apply(create("text", "a", age_s=45))  # no video
    store.apply(create("vreply", "a", age_s=40, has_video=True, in_reply_to_post_id="v",
                       conversation_id="v"))
    store.apply(create("rt_v", "b", age_s=30, retweet_of_post_id="v"))  # source known
    store.apply(create("rt_vreply", "b", age_s=20, retweet_of_post_id="vreply"))
    # Source not held: the event says what it is.
    store.apply(create("rt_ext", "b", age_s=10, retweet_of_post_id="x", has_video=True,
                       source_is_reply=False))
    store.apply(create("rt_unknown", "b", age_s=5, retweet_of_post_id="y", has_video=True))
    got = ids(store, following=("a", "b"), is_video_request=True)
    assert got == ["rt_ext", "rt_v", "v"]
    assert store.get("vreply").has_video and not store.get("vreply").video_eligible  # type: ignore[union-attr]


def test_video_cap_eviction_keeps_the_post_in_its_main_list() -> None:
    store, _ = make_store(max_videos_per_author=1, serve_videos_per_author=5)
    store.apply(create("v1", "a", age_s=20, has_video=True))
    store.apply(create("v2", "a", age_s=10, has_video=True))
    assert ids(store, following=("a",), is_video_request=True) == ["v2"]
    assert ids(store, following=("a",)) == ["v2", "v1"]
    assert store.apply(PostDelete(post_id="v2"))
    assert ids(store, following=("a",), is_video_request=True) == []


def test_reply_rules() -> None:
    store, _ = make_store(serve_secondary_per_author=10)
    store.apply(create("root_f", "followed", age_s=100))
    store.apply(create("root_s", "stranger", age_s=100))
    # Into a followed author's conversation, replying to the followed author: kept.
    store.apply(create("r1", "a", age_s=50, in_reply_to_post_id="root_f"))
    # Into a stranger's conversation: dropped.
    store.apply(create("r2", "a", age_s=40, in_reply_to_post_id="root_s"))
    # A self-thread under a followed conversation: kept (parent author == replier).
    store.apply(create("r3", "a", age_s=30, in_reply_to_post_id="r1"))
    # Reply to a stranger's reply inside a followed conversation: dropped.
    store.apply(create("s1", "stranger", age_s=35, in_reply_to_post_id="root_f"))
    store.apply(create("r4", "a", age_s=20, in_reply_to_post_id="s1"))
    # Context unknown (parent not held, nothing in the event): dropped.
    store.apply(create("r5", "a", age_s=10, in_reply_to_post_id="unknown"))
    # Context given by the event itself, into the viewer's own conversation: kept.
    store.apply(create("r6", "a", age_s=5, in_reply_to_post_id="vpost",
                       in_reply_to_author_id="viewer", conversation_id="vpost",
                       conversation_author_id="viewer"))
    assert store.get("r3").conversation_author_id == "followed"  # type: ignore[union-attr]
    got = ids(store, following=("a", "followed"))
    assert got == ["r6", "r3", "r1", "root_f"]


def test_secondary_cap_is_applied_before_the_reply_rule() -> None:
    store, _ = make_store(serve_secondary_per_author=2)
    store.apply(create("root", "followed", age_s=100))
    store.apply(create("good", "a", age_s=50, in_reply_to_post_id="root"))
    store.apply(create("stray1", "a", age_s=40, in_reply_to_post_id="elsewhere"))
    store.apply(create("stray2", "a", age_s=30, in_reply_to_post_id="elsewhere"))
    # The two newest secondary posts are strays: nothing of "a"'s replies is served.
    assert ids(store, following=("a", "followed")) == ["root"]
    store.apply(create("rt", "a", age_s=10, retweet_of_post_id="root"))
    assert ids(store, following=("a", "followed")) == ["rt", "root"]


def test_retweets_are_served_from_the_secondary_list_under_its_cap() -> None:
    store, _ = make_store(serve_secondary_per_author=2)
    store.apply(create("src", "x", age_s=100))
    for i in range(3):
        store.apply(create(f"rt{i}", "a", age_s=50 - i, retweet_of_post_id="src"))
    assert ids(store, following=("a",)) == ["rt2", "rt1"]
    assert store.get("rt0").source_author_id == "x"  # type: ignore[union-attr]


def test_time_budget_returns_partial_results() -> None:
    store, _ = make_store(scan_chunk=2)
    following = [f"u{i}" for i in range(10)]
    for i, author in enumerate(following):
        store.apply(create(f"p{i}", author, age_s=100 - i))
    result = store.get_in_network_posts(
        InNetworkQuery(user_id="v", following_user_ids=following, budget_s=0.0)
    )
    assert result.partial
    assert result.authors_scanned == 2
    assert [p.post_id for p in result.posts] == ["p1", "p0"]
    full = store.get_in_network_posts(
        InNetworkQuery(user_id="v", following_user_ids=following, budget_s=10.0)
    )
    assert not full.partial and len(full.posts) == 10


def test_unknown_event_type_is_refused() -> None:
    store, _ = make_store()
    with pytest.raises(TypeError):
        store.apply(object())  # type: ignore[arg-type]
