"""Post embedding with summary, and its for-reply variant.

The embedding is the text embedder's vector of the post. The summary is extractive:
the sentences closest to the centroid of all sentence embeddings (the most central
ones), in their original order; no offline model writes better summaries on a CPU, and
a chat model is the upgrade path. The for-reply variant embeds the reply together with
the summary of the post it answers, so replies land near their conversation.
"""

from __future__ import annotations

import numpy as np

from grebe.core.plan import Plan
from grebe.core.task import TaskContext
from grebe.flows import replies, shared
from grebe.flows.settings import EmbeddingSettings
from grebe.flows.signals import sentences
from grebe.types import Eligibility

VERSION = "1"
REASON_SUMMARY = "summary"
REPLY_CONTEXT = "{reply}\n\nIn reply to: {parent}"


def central_sentences(vectors: np.ndarray, k: int) -> list[int]:
    """Indices (in text order) of the k rows closest to the normalised centroid."""
    centroid = vectors.mean(axis=0)
    norm = float(np.linalg.norm(centroid))
    if norm == 0.0:
        return list(range(min(k, len(vectors))))
    closeness = vectors @ (centroid / norm)
    return sorted(np.argsort(-closeness, kind="stable")[:k].tolist())


async def summarize(ctx: TaskContext, text: str) -> str:
    settings: EmbeddingSettings = shared.settings_of(ctx)
    parts = sentences(text)[: settings.max_sentences]
    if len(parts) <= settings.summary_sentences:
        return " ".join(parts)
    embedder = ctx.services.embedder

    async def compute() -> str:
        chosen = central_sentences(await embedder.embed(parts), settings.summary_sentences)
        return " ".join(parts[i] for i in chosen)

    key = f"summary:{settings.summary_sentences}:{shared.digest(text)}"
    return await shared.shared(ctx, key, compute)


async def summary(ctx: TaskContext) -> str:
    text = await summarize(ctx, ctx.payload.post.text)
    ctx.output.reasons[REASON_SUMMARY] = text
    return text


async def embedding(ctx: TaskContext) -> list[float]:
    vector = await shared.text_embedding(ctx)
    ctx.output.embedding = vector.tolist()
    return ctx.output.embedding


async def reply_embedding(ctx: TaskContext) -> list[float]:
    parent_summary = await summarize(ctx, ctx.results["parent"].text)
    text = REPLY_CONTEXT.format(reply=ctx.payload.post.text, parent=parent_summary)
    ctx.output.embedding = (await shared.embed(ctx, text)).tolist()
    ctx.output.reasons["parent_summary"] = parent_summary
    return ctx.output.embedding


PLAN = Plan(
    Eligibility.POST_EMBEDDING_WITH_SUMMARY.value,
    tasks={
        "filter": shared.filters,
        "rate_limit": shared.rate_limit,
        "media": shared.media_task,
        "embedding": embedding,
        "summary": summary,
        "sink": shared.sink,
    },
    deps={
        "rate_limit": ["filter"],
        "media": ["rate_limit"],
        "embedding": ["media"],
        "summary": ["media"],
        "sink": ["embedding", "summary"],
    },
    eligibility=Eligibility.POST_EMBEDDING_WITH_SUMMARY.value,
    version=VERSION,
)

FOR_REPLY_PLAN = Plan(
    Eligibility.POST_EMBEDDING_WITH_SUMMARY_FOR_REPLY.value,
    tasks={
        "filter": shared.filters,
        "rate_limit": shared.rate_limit,
        "parent": replies.parent,
        "media": shared.media_task,
        "embedding": reply_embedding,
        "summary": summary,
        "sink": shared.sink,
    },
    deps={
        "rate_limit": ["filter"],
        "parent": ["rate_limit"],
        "media": ["parent"],
        "embedding": ["media"],
        "summary": ["media"],
        "sink": ["embedding", "summary"],
    },
    eligibility=Eligibility.POST_EMBEDDING_WITH_SUMMARY_FOR_REPLY.value,
    version=VERSION,
)
