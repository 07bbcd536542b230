"""Reply ranking: a 0-3 score of a reply against the post it answers.

Local classifier: relevance is the best cosine between the reply's embedding and those
of the thread it answers (the parent and the posts above it, up to `max_thread_posts`:
a reply may answer the root's question rather than the last remark), binned by
`relevance_bins` into 1-3; a spammy or toxic reply scores 0 whatever its relevance.
The LLM path reads the whole thread. The parent comes with the payload
(`context.parent`), the posts above it as `context.extra["ancestor_texts"]`.

Before any model: self-replies are skipped, and with `min_thread_followers` set only
threads whose parent or root author is that big are ranked (Grox's follower gate,
grebe.flows.thread). A reply scored 0 in a thread of `high_visibility_followers` is
labelled `risky_high_viz_reply` (verified authors exempt): the high-visibility
risky-reply signal.
"""

from __future__ import annotations

import bisect
from typing import Annotated

import msgspec

from grebe.core.plan import Plan
from grebe.core.task import SkipTask, TaskContext
from grebe.flows import llm, shared
from grebe.flows.catalog import Flow
from grebe.flows.settings import ReplySettings
from grebe.flows.sinks import SinkRules, sink_with
from grebe.flows.thread import ranking_skip, thread_facts, thread_texts
from grebe.types import Post

VERSION = "1"
NAME = "reply_ranking"  # the plan, its eligibility and its `plans.` key
LABEL_PREFIX = "reply_score:"
SKIP_NO_PARENT = "reply without its parent post in the payload context"
LABEL_RISKY = "risky_high_viz_reply"


class ReplyVerdict(msgspec.Struct):
    score: Annotated[int, msgspec.Meta(ge=0, le=3)]
    reason: str


async def parent(ctx: TaskContext) -> Post:
    """Skip before any model runs when the payload lacks the parent post."""
    found = ctx.payload.context.parent
    if found is None or not found.text.strip():
        raise SkipTask(SKIP_NO_PARENT)
    return found


async def gated_parent(ctx: TaskContext) -> Post:
    """`parent`, and reply ranking's own gate: no self-replies, the follower gate."""
    found = await parent(ctx)
    why = ranking_skip(thread_facts(ctx.payload), shared.settings_of(ctx))
    if why:
        raise SkipTask(why)
    return found


def flag_risky(ctx: TaskContext, score: int, settings: ReplySettings) -> None:
    """A worthless (0) reply where it is seen most: label it so it can be held back."""
    author = ctx.payload.context.author or ctx.payload.user
    most = thread_facts(ctx.payload).most_followers()
    if score or most is None or most < settings.high_visibility_followers:
        return
    if author is not None and author.verified:
        return
    ctx.output.labels.append(LABEL_RISKY)
    ctx.output.reasons[LABEL_RISKY] = (f"score 0 in a thread whose parent/root author has "
                                       f"{most} followers (>= "
                                       f"{settings.high_visibility_followers})")


async def relevance(ctx: TaskContext) -> float | None:
    """The best cosine between the reply and any post of its thread."""
    if shared.uses_llm(ctx):
        return None
    settings: ReplySettings = shared.settings_of(ctx)
    reply = await shared.text_embedding(ctx)
    thread = thread_texts(ctx.payload, settings.max_thread_posts)
    return max([shared.cosine(reply, await shared.embed(ctx, t)) for t in thread])


def render_thread(texts: list[str]) -> str:
    """The thread for the prompt: numbered posts, root first, the parent last."""
    last = len(texts)
    return "\n\n".join(
        f"#### Post {i} ({'the post replied to' if i == last else 'earlier in the thread'})"
        f"\n{t}" for i, t in enumerate(texts, 1))


async def toxicity(ctx: TaskContext) -> float:
    if shared.uses_llm(ctx):
        return 0.0
    text = ctx.payload.post.text
    hate = await shared.hate_scores(ctx, text)
    return max(await shared.offensive_score(ctx, text), hate.get("hate", 0.0),
               hate.get("offensive", 0.0))


async def spam(ctx: TaskContext) -> float:
    if shared.uses_llm(ctx):
        return 0.0
    return await shared.spam_head_score(ctx, ctx.payload.post.text)


def local_score(relevance: float, toxicity: float, spam: float,
                settings: ReplySettings) -> tuple[int, str]:
    if spam >= settings.spam_threshold:
        return 0, f"spam {spam:.2f}"
    if toxicity >= settings.toxicity_threshold:
        return 0, f"toxic {toxicity:.2f}"
    score = bisect.bisect_right(sorted(settings.relevance_bins), relevance)
    return min(score, 3), f"relevance {relevance:.2f}, toxicity {toxicity:.2f}, spam {spam:.2f}"


async def rank(ctx: TaskContext) -> int:
    settings: ReplySettings = shared.settings_of(ctx)
    if ctx.services.settings.backend(ctx.plan) == "llm":
        thread = thread_texts(ctx.payload, settings.max_thread_posts)
        verdict = await llm.ask(ctx, "reply_ranking", ReplyVerdict,
                                text=ctx.payload.post.text, parent=render_thread(thread))
        score, reason = verdict.score, verdict.reason
    else:
        score, reason = local_score(ctx.results["relevance"], ctx.results["toxicity"],
                                    ctx.results["spam"], settings)
    ctx.output.labels.append(f"{LABEL_PREFIX}{score}")
    ctx.output.scores["reply_score"] = float(score)
    if ctx.results["relevance"] is not None:
        ctx.output.scores["relevance"] = round(ctx.results["relevance"], 4)
    ctx.output.reasons["reply_score"] = reason
    flag_risky(ctx, score, settings)
    return score


PLAN = Plan(
    NAME,
    tasks={
        "filter": shared.filters,
        "rate_limit": shared.rate_limit,
        "parent": gated_parent,
        "media": shared.media_task,
        "relevance": relevance,
        "toxicity": toxicity,
        "spam": spam,
        "rank": rank,
        "sink": sink_with(SinkRules(post_flags=frozenset({LABEL_RISKY}))),  # label applied
    },
    deps={
        "rate_limit": ["filter"],
        "parent": ["rate_limit"],
        "media": ["parent"],
        "relevance": ["media"],
        "toxicity": ["media"],
        "spam": ["media"],
        "rank": ["relevance", "toxicity", "spam"],
        "sink": ["rank"],
    },
    eligibility=NAME,
    version=VERSION,
)

FLOW = Flow(plan=PLAN, settings=ReplySettings, order=50)
