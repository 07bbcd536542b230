"""The selection rules one by one: follower ranges (known, unknown, from the producer's
`context.extra`), and bad settings refused at load with the field named."""

import pytest

from grebe.config import load_config
from grebe.errors import ConfigError
from grebe.selection import Selection
from grebe.selection.rules import why_not
from grebe.types import Post, TaskPayload, User, UserContext


def reply(context: UserContext, author: str = "ann") -> TaskPayload:
    post = Post(id="r", author_id=author, reply_to_post_id="p", conversation_id="root")
    return TaskPayload(payload_id="x", post=post, context=context)


def users(parent: int | None, root: int | None) -> UserContext:
    return UserContext(
        parent=Post(id="p", author_id="pa"), root=Post(id="root", author_id="ra"),
        parent_author=None if parent is None else User(id="pa", follower_count=parent),
        root_author=None if root is None else User(id="ra", follower_count=root))


SPAM = Selection.model_validate({"thread_followers": {"max": 60_000}})
RANKING = Selection.model_validate({"thread_followers": {"min": 60_001}})


@pytest.mark.parametrize(("parent", "root", "spam", "ranking"), [
    (500, 500, None, "thread_followers"),
    (500, 90_000, "thread_followers", None),  # the root's author is big: ranking's
    (90_000, 500, "thread_followers", None),
    (500, None, "thread_followers_unknown", "thread_followers_unknown"),
    (90_000, None, "thread_followers", None),  # one big author is enough for ranking
    (None, None, "thread_followers_unknown", "thread_followers_unknown"),
])
def test_grox_60000_follower_rules(parent, root, spam, ranking) -> None:
    payload = reply(users(parent, root))
    assert why_not(SPAM, payload) == spam
    assert why_not(RANKING, payload) == ranking


def test_counts_and_root_author_from_the_producers_extra_keys() -> None:
    extra = {"parent_author_followers": 100, "root_author_id": "ann",
             "root_author_followers": 70_000}
    payload = reply(UserContext(parent=Post(id="p", author_id="pa"), extra=extra))
    assert why_not(RANKING, payload) is None
    no_self = Selection.model_validate({"exclude": {"self_replies": True}})
    assert why_not(no_self, payload) == "self_reply"  # ann wrote the root


def test_parent_and_root_ranges_and_excluded_authors() -> None:
    payload = reply(users(500, 90_000))
    assert why_not(Selection.model_validate({"parent_followers": {"min": 1000}}),
                   payload) == "parent_followers"
    assert why_not(Selection.model_validate({"root_followers": {"max": 1000}}),
                   payload) == "root_followers"
    assert why_not(Selection.model_validate({"exclude": {"reply_to_authors": ["ra"]}}),
                   payload) == "reply_to_excluded_author"
    assert why_not(Selection.model_validate({"exclude": {"authors": ["ann"]}}),
                   payload) == "excluded_author"


def test_languages_and_a_post_of_unknown_language() -> None:
    english = Selection.model_validate({"languages": ["en"]})
    post = Post(id="o", author_id="ann", lang="en")
    assert why_not(english, TaskPayload(payload_id="x", post=post)) is None
    other = TaskPayload(payload_id="x", post=Post(id="o", author_id="ann", lang="de"))
    assert why_not(english, other) == "language"
    unknown = TaskPayload(payload_id="x", post=Post(id="o", author_id="ann"))
    assert why_not(english, unknown) == "language_unknown"


def test_a_stream_without_selection_selects_everything() -> None:
    assert Selection().selects_everything
    assert not Selection.model_validate({"mode": "deluxe", "min_views": 1}).selects_everything
    assert Selection.model_validate({"mode": "deluxe"}).selects_everything  # mode only


@pytest.mark.parametrize(("selection", "field"), [
    ({"post_types": ["story"]}, "streams.0.selection.post_types.0"),
    ({"mode": "turbo"}, "streams.0.selection.mode"),
    ({"thread_followers": {"min": 10, "max": 5}}, "streams.0.selection.thread_followers"),
    ({"min_likes": 3}, "streams.0.selection.min_likes"),
    ({"post_types": ["original"], "thread_followers": {"min": 5}},
     "streams.0.selection: thread_followers apply to replies only"),
])
def test_bad_selection_is_refused_at_load_naming_the_field(selection, field) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(streams=[{"name": "s", "eligibilities": ["basic"], "selection": selection}])
