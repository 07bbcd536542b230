"""Who a reply answers, and how visible that thread is: what the reply filters need.

The parent post comes with the payload (`context.parent`); follower counts of the
parent's and the root's authors, and the root author, come as `context.extra` keys
(below) from the producer or a hydrating loader. A direct reply to a root post has
parent = root. A count nobody supplied is unknown (None), never a silent zero: each
filter says what it does with an unknown count.
"""

from __future__ import annotations

from dataclasses import dataclass

from grebe.flows.settings import ReplyFilterSettings, ReplySettings
from grebe.types import TaskPayload

#: `context.extra` keys the reply filters read.
PARENT_AUTHOR_FOLLOWERS = "parent_author_followers"
ROOT_AUTHOR_ID = "root_author_id"
ROOT_AUTHOR_FOLLOWERS = "root_author_followers"
ANCESTOR_TEXTS = "ancestor_texts"  # texts above the parent, root first
SKIP_REPLY_TO_BOT = "reply to the platform's own bot account"
SKIP_SELF_REPLY = "self-reply (the replier wrote the parent or root post)"
SKIP_BIG_THREAD = "thread too visible for the spam plan (reply ranking judges it)"
SKIP_SMALL_THREAD = "thread below the reply-ranking follower gate"


@dataclass(frozen=True, slots=True)
class ThreadFacts:
    replier: str
    parent_author: str | None
    root_author: str | None
    parent_followers: int | None
    root_followers: int | None

    @property
    def self_reply(self) -> bool:
        """The replier answers their own parent or root post."""
        return self.replier in {self.parent_author, self.root_author}

    def most_followers(self) -> int | None:
        known = [n for n in (self.parent_followers, self.root_followers) if n is not None]
        return max(known) if known else None


def thread_texts(payload: TaskPayload, limit: int) -> list[str]:
    """The conversation a reply answers, root first and the parent last: the parent
    and up to `limit` - 1 posts above it (the nearest ones when the thread is longer)."""
    parent = payload.context.parent
    above = payload.context.extra.get(ANCESTOR_TEXTS) or []
    texts = [t for t in above if isinstance(t, str) and t.strip()]
    if parent is not None and parent.text.strip():
        texts.append(parent.text)
    return texts[-limit:]


def _count(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def thread_facts(payload: TaskPayload) -> ThreadFacts:
    extra, parent = payload.context.extra, payload.context.parent
    parent_author = parent.author_id if parent is not None else None
    parent_followers = _count(extra.get(PARENT_AUTHOR_FOLLOWERS))
    root_author = extra.get(ROOT_AUTHOR_ID)
    if root_author is None:  # no root named: the parent is the root
        return ThreadFacts(payload.post.author_id, parent_author, parent_author,
                           parent_followers, parent_followers)
    return ThreadFacts(payload.post.author_id, parent_author, str(root_author),
                       parent_followers, _count(extra.get(ROOT_AUTHOR_FOLLOWERS)))


def spam_reply_skip(facts: ThreadFacts, rules: ReplyFilterSettings) -> str | None:
    """Why the spam plan leaves this reply alone, or None. Unknown follower counts pass
    (a reply is judged rather than silently dropped for missing context)."""
    bots = set(rules.bot_account_ids)
    if bots & {facts.parent_author, facts.root_author}:
        return SKIP_REPLY_TO_BOT
    if rules.skip_self_replies and facts.self_reply:
        return SKIP_SELF_REPLY
    limits = ((facts.parent_followers, rules.max_parent_followers, "parent"),
              (facts.root_followers, rules.max_root_followers, "root"))
    for count, limit, whose in limits:
        if count is not None and limit is not None and count > limit:
            return f"{SKIP_BIG_THREAD}: {whose} author has {count} followers > {limit}"
    return None


def ranking_skip(facts: ThreadFacts, settings: ReplySettings) -> str | None:
    """Why reply ranking leaves this reply alone (Grox: self-replies, and threads whose
    parent and root authors are both small), or None."""
    if settings.skip_self_replies and facts.self_reply:
        return SKIP_SELF_REPLY
    gate = settings.min_thread_followers
    if gate:
        most = facts.most_followers()
        if most is None:
            return f"{SKIP_SMALL_THREAD}: no follower counts of the parent or root author"
        if most < gate:
            return f"{SKIP_SMALL_THREAD}: parent/root authors have at most {most} < {gate}"
    return None
