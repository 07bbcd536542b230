"""The hydration step: runs once per payload in the engine, before the plan master.

Why a step before PlanMaster and not a shared first task in each plan: every plan of a
payload needs the same hydrated post; a post that is in no table must skip *every* plan
with one reason (`not_found`) and succeed, not fail each plan; and no flow (nor any flow
added later) has to remember to declare it. The step also records every post that
passes, so the post table is filled by every stream.

What it fills, each only when the message lacks it:
- the post itself, when the message carries only ids (`Post.is_stub`);
- the author (`payload.user` and `context.author`);
- the parent (`reply_to_post_id`) and the thread's root, and both their authors;
- the author's recent posts (`context.recent_posts`, newest first, this post excluded).
A missing post is `not_found`; a missing author, parent or root is left empty (the
plans that need one skip, as reply ranking does without its parent). A lookup that is
down raises HydrationUnavailableError: retried, never dead-lettered as the post's fault.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import msgspec

from grebe import constants as C
from grebe.core.planmaster import PlanMaster
from grebe.hydration.base import Loader, PostTable, RemembersRecorded
from grebe.types import Post, TaskPayload, TaskResult, TaskStatus, User

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Skip:
    """Hydration found nothing to run plans on; every eligible plan skips with this."""

    reason: str


class Hydrator:
    def __init__(self, loader: Loader, *, table: PostTable | None = None,
                 recent_posts: int = C.DEFAULT_HYDRATION_RECENT_POSTS) -> None:
        self.loader = loader
        self.table = table  # None: nothing is recorded (an HTTP lookup is read-only)
        self.recent_posts = recent_posts

    async def record(self, payload: TaskPayload) -> None:
        """Put what the message brought (full posts and users) into the post table."""
        if self.table is None:
            return
        context = payload.context
        posts = [p for p in (payload.post, context.parent, context.root, payload.post.quoted_post)
                 if p is not None and p.id and not p.is_stub]
        users = [u for u in (payload.user, context.author, context.parent_author,
                             context.root_author) if u is not None and u.id]
        if posts or users:
            await self.table.record(posts, users)
            if isinstance(self.loader, RemembersRecorded):
                self.loader.remember(posts, users)

    async def hydrate(self, payload: TaskPayload) -> TaskPayload | Skip:
        await self.record(payload)
        if not payload.has_post:
            return Skip(C.HYDRATION_NO_POST)
        post, context = payload.post, payload.context
        if post.is_stub:
            found = (await self.loader.get_posts([post.id])).get(post.id)
            if found is None:
                return Skip(f"{C.HYDRATION_NOT_FOUND}: post {post.id}")
            post = found
        parent, root = context.parent, context.root
        wanted = [i for i in (_want(parent, post.reply_to_post_id),
                              _want(root, post.root_post_id)) if i]
        if wanted:
            loaded = await self.loader.get_posts(wanted)
            parent = parent or loaded.get(post.reply_to_post_id or "")
            root = root or loaded.get(post.root_post_id or "")
        author = payload.user or context.author
        users = await self._users(
            (author, post.author_id), (context.parent_author, parent.author_id if parent else None),
            (context.root_author, root.author_id if root else None))
        recent = context.recent_posts
        if not recent and self.recent_posts > 0 and post.author_id:
            latest = await self.loader.recent_posts(post.author_id, self.recent_posts + 1)
            recent = tuple(p for p in latest if p.id != post.id)[: self.recent_posts]
        author = author or users.get(post.author_id)
        new_context = msgspec.structs.replace(
            context, author=context.author or author, parent=parent, root=root,
            parent_author=context.parent_author or _author(users, parent),
            root_author=context.root_author or _author(users, root),
            recent_posts=recent,
        )
        return msgspec.structs.replace(payload, post=post, user=payload.user or author,
                                       context=new_context)

    async def _users(self, *pairs: tuple[User | None, str | None]) -> dict[str, User]:
        ids = [user_id for known, user_id in pairs if known is None and user_id]
        return await self.loader.get_users(ids) if ids else {}


def _author(users: dict[str, User], post: Post | None) -> User | None:
    return users.get(post.author_id) if post is not None else None


def _want(known: Post | None, post_id: str | None) -> str | None:
    return post_id if known is None and post_id else None


class HydratingMaster(PlanMaster):
    """A PlanMaster that hydrates each payload first (and wraps the configured master,
    e.g. the traced one, so tracing still sees the hydrated payload). A user-only
    payload (Grox has them) skips every eligible plan with reason `no_post`: no plan
    here needs only a user yet."""

    __slots__ = ("hydrator", "inner")

    def __init__(self, inner: PlanMaster, hydrator: Hydrator | None) -> None:
        """`hydrator=None` (hydration off): only user-only payloads are caught, so no
        plan ever runs on a post that is not there."""
        super().__init__(inner.plans, services=inner.services)
        self.inner = inner
        self.hydrator = hydrator

    async def run(self, payload: TaskPayload) -> TaskResult:
        if self.hydrator is None:
            if payload.has_post:
                return await self.inner.run(payload)
            return self.skipped(payload, C.HYDRATION_NO_POST)
        hydrated = await self.hydrator.hydrate(payload)
        if isinstance(hydrated, Skip):
            return self.skipped(payload, hydrated.reason)
        return await self.inner.run(hydrated)

    def skipped(self, payload: TaskPayload, reason: str) -> TaskResult:
        """Every eligible plan SKIPPED with the reason: success, so the message is acked
        (a post that is in no table is not malformed), and the reason is in the result."""
        now = time.time()
        log.info("payload %s: plans skipped (%s)", payload.payload_id, reason)
        return TaskResult(
            payload_id=payload.payload_id, post_id=payload.post.id, success=True,
            plans={plan.name: TaskStatus.SKIPPED for plan in self.eligible(payload)},
            reasons={C.HYDRATION_REASON_KEY: reason}, started_at=now, finished_at=now,
        )
