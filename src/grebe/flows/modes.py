"""What a stream's mode (TaskPayload.mode, grebe.selection.Mode) changes in the plans.

Grox's PTOS derives a mode from the generator a post came from (STANDARD, DELUXE,
RECOVERY, BACKFILL) and reads it in three places; grebe reads it in the same ones:
- the annotation says which pass made it (Grox appends `identifier=task_type` to the
  post's history and labels its metrics with the mode): reason `ptos.mode`;
- dedupe: Grox keeps a deluxe cache apart from the standard one, so a deluxe pass is
  never skipped because the realtime pass saw the post (`dedupe_scope`, every plan);
- the deluxe high-fav recheck: a post with media and at least 128 likes that matched no
  adult content gets a second, harder look (`deluxe_recheck`, applied in flows.ptos).
  Grox injects a candidate AdultContent violation for its bigger model to confirm or
  clear; locally, the images' NSFW score is held to the lower `deluxe_sexual_threshold`.
"""

from __future__ import annotations

from grebe.core.task import TaskContext
from grebe.selection import Mode
from grebe.types import TaskPayload

HIGH_FAV_THRESHOLD = 128  # Grox's PTOS: likes from which deluxe rechecks adult content
MODE_REASON_KEY = "ptos.mode"


def dedupe_scope(ctx: TaskContext) -> str:
    """The plan's dedupe key space: deluxe passes have their own."""
    return f"{ctx.plan}:{Mode.DELUXE}" if ctx.payload.mode == Mode.DELUXE else ctx.plan


def deluxe_recheck(payload: TaskPayload) -> bool:
    """The post gets deluxe mode's high-fav adult-content recheck."""
    post = payload.post
    return (payload.mode == Mode.DELUXE and bool(post.media)
            and post.like_count >= HIGH_FAV_THRESHOLD)
