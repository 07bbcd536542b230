"""Whether a stream selects a hydrated post: `why_not` names the first rule it breaks.

Pure functions of the payload (post, author, parent, root and their authors), so each
of Grox's generators can be checked post by post in a unit test without an engine.
Thread facts come from the typed context (`context.parent`, `parent_author`, ...,
filled by hydration) and else from the `context.extra` keys producers sent before
hydration existed (`parent_author_followers`, `root_author_id`, `root_author_followers`).
"""

from __future__ import annotations

from grebe.selection.settings import FollowerRange, PostType, Selection
from grebe.types import Post, TaskPayload, UserContext

# Rule names, the `<rule>` of `not_selected:<rule>`.
POST_TYPE = "post_type"
LANGUAGE = "language"
MIN_ENGAGEMENT = "min_engagement"
MIN_VIEWS = "min_views"
PARENT_FOLLOWERS = "parent_followers"
ROOT_FOLLOWERS = "root_followers"
THREAD_FOLLOWERS = "thread_followers"
UNKNOWN = "_unknown"  # suffix: the rule needs a count nobody supplied
SELF_REPLY = "self_reply"
REPLY_TO_EXCLUDED = "reply_to_excluded_author"
EXCLUDED_AUTHOR = "excluded_author"
PROTECTED_AUTHOR = "protected_author"
REQUIRES_MEDIA = "requires_media"
REQUIRES_VIDEO = "requires_video"

# `context.extra` keys of producers that send thread facts as plain values.
EXTRA_PARENT_FOLLOWERS = "parent_author_followers"
EXTRA_ROOT_AUTHOR_ID = "root_author_id"
EXTRA_ROOT_FOLLOWERS = "root_author_followers"


def post_type(post: Post) -> PostType:
    """A repost first (it may repost a reply), then reply, then quote."""
    if post.retweet_of_post_id:
        return PostType.REPOST
    if post.reply_to_post_id:
        return PostType.REPLY
    if post.quote_of_post_id:
        return PostType.QUOTE
    return PostType.ORIGINAL


def engagement(post: Post) -> int:
    return post.like_count + post.repost_count + post.reply_count + post.quote_count


def _count(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _root_is_parent(post: Post) -> bool:
    """A direct reply to the thread's first post: the parent is the root."""
    root = post.root_post_id
    return root is None or root == post.reply_to_post_id


def parent_author(context: UserContext) -> str | None:
    if context.parent is not None and context.parent.author_id:
        return context.parent.author_id
    return context.parent_author.id if context.parent_author is not None else None


def root_author(post: Post, context: UserContext) -> str | None:
    if context.root is not None and context.root.author_id:
        return context.root.author_id
    if context.root_author is not None:
        return context.root_author.id
    named = context.extra.get(EXTRA_ROOT_AUTHOR_ID)
    if named is not None:
        return str(named)
    return parent_author(context) if _root_is_parent(post) else None


def parent_followers(context: UserContext) -> int | None:
    known = context.parent_followers
    return known if known is not None else _count(context.extra.get(EXTRA_PARENT_FOLLOWERS))


def root_followers(post: Post, context: UserContext) -> int | None:
    known = context.root_followers
    if known is None:
        known = _count(context.extra.get(EXTRA_ROOT_FOLLOWERS))
    if known is None and _root_is_parent(post) and EXTRA_ROOT_AUTHOR_ID not in context.extra:
        return parent_followers(context)
    return known


def _range(rule: str, bounds: FollowerRange, count: int | None) -> str | None:
    if not bounds.active:
        return None
    if count is None:
        return rule + UNKNOWN
    return None if bounds.holds(count) else rule


def why_not(selection: Selection, payload: TaskPayload) -> str | None:
    """The rule the payload's post breaks, or None when the stream selects it."""
    post, context = payload.post, payload.context
    kind = post_type(post)
    if kind not in selection.post_types:
        return POST_TYPE
    if selection.languages is not None and post.lang not in selection.languages:
        return LANGUAGE if post.lang else LANGUAGE + UNKNOWN
    if engagement(post) < selection.min_engagement:
        return MIN_ENGAGEMENT
    if post.view_count < selection.min_views:
        return MIN_VIEWS
    if selection.requires_media and not post.media:
        return REQUIRES_MEDIA
    if selection.requires_video and not post.videos:
        return REQUIRES_VIDEO
    exclude = selection.exclude
    if post.author_id in exclude.authors:
        return EXCLUDED_AUTHOR
    author = payload.user or context.author
    if exclude.protected_authors and author is not None and author.protected:
        return PROTECTED_AUTHOR
    return _thread_rule(selection, post, context) if kind is PostType.REPLY else None


def _thread_rule(selection: Selection, post: Post, context: UserContext) -> str | None:
    """The rules about what a reply answers (they pass a post that is not a reply)."""
    exclude = selection.exclude
    authors = {parent_author(context), root_author(post, context)} - {None}
    if exclude.reply_to_authors and authors & set(exclude.reply_to_authors):
        return REPLY_TO_EXCLUDED
    if exclude.self_replies and post.author_id in authors:
        return SELF_REPLY
    parent, root = parent_followers(context), root_followers(post, context)
    for rule, bounds, count in (
        (PARENT_FOLLOWERS, selection.parent_followers, parent),
        (ROOT_FOLLOWERS, selection.root_followers, root),
    ):
        if broken := _range(rule, bounds, count):
            return broken
    return _thread_range(selection.thread_followers, [parent, root])


def _thread_range(bounds: FollowerRange, counts: list[int | None]) -> str | None:
    """Both the parent's and the root's authors: `min` holds when either reaches it
    (Grox's "parent or root > 60,000"), `max` when both stay under it ("both <=")."""
    if not bounds.active:
        return None
    known = [n for n in counts if n is not None]
    unknown = len(known) < len(counts)
    if bounds.max is not None and any(n > bounds.max for n in known):
        return THREAD_FOLLOWERS
    if bounds.min is not None and not any(n >= bounds.min for n in known):
        return THREAD_FOLLOWERS + UNKNOWN if unknown else THREAD_FOLLOWERS
    if bounds.max is not None and unknown:
        return THREAD_FOLLOWERS + UNKNOWN
    return None
