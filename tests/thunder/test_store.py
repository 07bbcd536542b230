"""The store's rules: retention, trim, caps, deletes, video and reply eligibility."""

from __future__ import annotations

import random

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


# ---- the query against a plain restatement of its rules ------------------------------


def reference(store: ThunderStore, query: InNetworkQuery) -> list[str]:
    """The rules written the slow, obvious way: each followed author's newest k of each
    kind (skipping excluded ids), replies kept only into a followed conversation, then
    a stable sort newest first (ties in candidate order: originals, then replies and
    retweets, each in following order)."""
    s = store.settings
    allowed = {*query.following_user_ids, query.user_id}
    if query.is_video_request:
        kinds = [("videos", s.serve_videos_per_author)]
    else:
        kinds = [("originals", s.serve_originals_per_author),
                 ("secondary", s.serve_secondary_per_author)]
    candidates = []
    for attr, k in kinds:
        for author in query.following_user_ids:
            posts = store.authors.get(author)
            if posts is None or not k:
                continue
            kept = [p for p in getattr(posts, attr) if p.post_id not in query.exclude_post_ids]
            for p in kept[-k:]:
                if p.in_reply_to_post_id is not None and not (
                    p.conversation_author_id in allowed
                    and (p.in_reply_to_author_id in allowed
                         or p.in_reply_to_author_id == p.author_id)
                ):
                    continue
                candidates.append(p)
    candidates.sort(key=lambda p: -p.created_at)
    return [p.post_id for p in candidates[: query.max_results]]


def random_store(seed: int) -> tuple[ThunderStore, list[str], random.Random]:
    rng = random.Random(seed)
    store, clock = make_store(
        max_originals_per_author=rng.choice([2, 6, 64]),
        max_secondary_per_author=rng.choice([1, 4, 64]),
        max_videos_per_author=rng.choice([1, 3]),
        serve_originals_per_author=rng.choice([0, 1, 3, 5]),
        serve_secondary_per_author=rng.choice([0, 2, 3]),
        serve_videos_per_author=rng.choice([1, 3]),
        scan_chunk=rng.choice([1, 4, 256]),
        retention_s=500.0,
    )
    authors = [f"u{i}" for i in range(rng.choice([3, 12]))]
    pids: list[str] = []
    for i in range(300):
        if pids and rng.random() < 0.05:
            store.apply(PostDelete(post_id=rng.choice(pids)))
            continue
        kw: dict[str, object] = {"has_video": rng.random() < 0.3}
        kind = rng.random()
        if pids and kind < 0.3:
            kw["in_reply_to_post_id"] = rng.choice(pids)
        elif pids and kind < 0.45:
            kw["retweet_of_post_id"] = rng.choice(pids)
        # Whole seconds, so many posts share a timestamp.
        age = float(rng.randrange(20)) if rng.random() < 0.5 else rng.random() * 400
        store.apply(create(f"p{i}", rng.choice(authors), age_s=age, **kw))
        pids.append(f"p{i}")
        if rng.random() < 0.01:
            clock.now += 50
            store.trim()
    return store, [*authors, "nobody"], rng


@pytest.mark.parametrize("seed", range(40))
def test_query_matches_the_rules_written_plainly(seed: int) -> None:
    store, authors, rng = random_store(seed)
    pids = list(store.by_id)
    for _ in range(25):
        query = InNetworkQuery(
            user_id=rng.choice(["viewer", authors[0]]),
            following_user_ids=rng.sample(authors, rng.randrange(1, len(authors) + 1)),
            exclude_post_ids=set(rng.sample(pids, min(len(pids), rng.choice([0, 2, 40, 999])))),
            max_results=rng.choice([1, 3, 10, 800]),
            is_video_request=rng.random() < 0.25,
        )
        result = store.get_in_network_posts(query)
        assert [p.post_id for p in result.posts] == reference(store, query)
        assert result.authors == len({p.author_id for p in result.posts})


def test_distinct_authors_are_counted_once_when_followed_twice() -> None:
    store, _ = make_store()
    for i in range(3):
        store.apply(create(f"a{i}", "a", age_s=30 - i))
        store.apply(create(f"b{i}", "b", age_s=20 - i, in_reply_to_post_id="a0"))
    query = InNetworkQuery(user_id="viewer", following_user_ids=["a", "b", "a", "x"])
    result = store.get_in_network_posts(query)
    assert result.authors == len({p.author_id for p in result.posts}) == 2


@pytest.mark.parametrize("seed", range(10))
def test_timestamp_columns_stay_in_step_with_the_records(seed: int) -> None:
    store, _, _ = random_store(seed)
    for posts in store.authors.values():
        for attr in ("originals", "secondary", "videos"):
            records = getattr(posts, attr)
            assert list(getattr(posts, f"{attr}_ts")) == [p.created_at for p in records]
            assert all(store.by_id[p.post_id] is p for p in records)
        assert posts.author_id is (posts.originals or posts.secondary)[0].author_id


def test_dropped_replies_are_replaced_by_older_posts() -> None:
    # Forty replies into an unfollowed conversation are newer than every original:
    # the answer needs more rounds than the first `max_results` newest.
    store, _ = make_store(serve_secondary_per_author=64, max_secondary_per_author=64)
    store.apply(create("root", "stranger", age_s=500))
    for i in range(10):
        store.apply(create(f"orig{i}", "a", age_s=300 + i))
    for i in range(40):
        store.apply(create(f"r{i}", "a", age_s=100 - i, in_reply_to_post_id="root"))
    result = store.get_in_network_posts(
        InNetworkQuery(user_id="v", following_user_ids=["a"], max_results=3))
    assert [p.post_id for p in result.posts] == ["orig0", "orig1", "orig2"]
    assert result.candidates == 45  # 5 originals and 40 replies under the caps


def test_equal_times_keep_candidate_order() -> None:
    store, _ = make_store()
    store.apply(create("src", "x", age_s=100))
    store.apply(create("b_rt", "b", age_s=10, retweet_of_post_id="src"))
    store.apply(create("b1", "b", age_s=10))
    store.apply(create("a1", "a", age_s=10))
    store.apply(create("a2", "a", age_s=10))
    # Originals before retweets, then following order, then arrival order.
    assert ids(store, following=("b", "a")) == ["b1", "a1", "a2", "b_rt"]
    assert ids(store, following=("b", "a"), max_results=2) == ["b1", "a1"]
    assert ids(store, following=("b", "a"), exclude_post_ids={"b1"}) == ["a1", "a2", "b_rt"]
