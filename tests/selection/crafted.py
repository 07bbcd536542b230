"""Crafted posts for the selection tests: one of each kind a generator may or may not
select (an original, a reply, a self-reply, a reply to a bot, a reply under a big
account, a low-traction post, a media post, another language...)."""

from __future__ import annotations

from grebe.types import Envelope, Media, Post, User, UserContext

BOT = "grok"  # the platform's bot account of the crafted replies
BIG = 2_000_000  # followers of a big account (> Grox's 60,000)
SMALL = 500
TRACTION = {"like_count": 40, "repost_count": 5, "reply_count": 3, "view_count": 20_000}


def _post(post_id: str, author: str = "ann", **fields: object) -> Post:
    values: dict[str, object] = {"text": f"post {post_id}", "lang": "en", **TRACTION}
    values.update(fields)
    return Post(id=post_id, author_id=author, **values)  # type: ignore[arg-type]


def _reply(post_id: str, parent_author: str, parent_followers: int | None,
           author: str = "ann", **fields: object) -> Envelope:
    parent = _post(f"{post_id}-parent", parent_author)
    context = UserContext(
        parent=parent,
        parent_author=None if parent_followers is None else User(
            id=parent_author, follower_count=parent_followers))
    return Envelope(post=_post(post_id, author, reply_to_post_id=parent.id, **fields),
                    user=User(id=author), context=context)


def _original(post_id: str, **fields: object) -> Envelope:
    author = User(id="ann", protected=bool(fields.pop("protected", False)))
    return Envelope(post=_post(post_id, **fields), user=author)


LOW = {"like_count": 1, "repost_count": 0, "reply_count": 0, "view_count": 30}

CRAFTED: dict[str, Envelope] = {
    "original": _original("original"),
    "low_traction": _original("low_traction", **LOW),
    "protected": _original("protected", protected=True),
    "quote": _original("quote", quote_of_post_id="q0"),
    "repost": _original("repost", retweet_of_post_id="r0"),
    "image": _original("image", media=(Media(kind="image", url="https://x.test/a.jpg"),)),
    "video": _original("video", media=(Media(kind="video", url="https://x.test/a.mp4"),)),
    "japanese": _original("japanese", lang="ja"),
    "unpopular": _original("unpopular", view_count=900),
    "reply": _reply("reply", "bob", SMALL),
    "reply_to_big": _reply("reply_to_big", "star", BIG),
    "self_reply": _reply("self_reply", "ann", SMALL),
    "reply_to_bot": _reply("reply_to_bot", BOT, BIG),
    "reply_no_counts": _reply("reply_no_counts", "bob", None),
    "low_traction_reply": _reply("low_traction_reply", "bob", SMALL, **LOW),
}

REPLIES = {k for k, e in CRAFTED.items() if e.post.is_reply}
EVERYTHING = set(CRAFTED)
LOW_TRACTION = {"low_traction", "low_traction_reply"}
NOT_REPLIES_UNPROTECTED = EVERYTHING - REPLIES - {"protected"}
