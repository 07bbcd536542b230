"""Post embedding with summary, and its for-reply variant.

Summary, then embed (as Grox does): the summary is taken over everything the post
says — its text, the text read from its images (OCR) and its transcript — and the
embedding is the text embedder's vector of that summary, so a meme whose words are in
the image, or a video whose point is spoken, embeds by what it says rather than by its
caption alone. The summary is extractive: the sentences closest to the centroid of
all sentence embeddings (the most central ones), in their original order; no offline
model writes better summaries on a CPU, and a chat model is the upgrade path. The
for-reply variant embeds the reply together with the summary of the post it answers,
so replies land near their conversation.

One encoder pass per text (version 3): the sentence vectors and the summary's vector
are pooled from the text's own pass (`shared.encoded`: each sentence's token vectors
summed there), the pass the text heads of the other plans use too. Version 2 encoded
every sentence again and then the summary again: 1.76 encoder inputs per real tweet
where 1 does (docs/benchmarks.md, Real flows). A text of no more sentences than the
summary keeps is its own summary, and its vector is the text's, as before; a longer
one's vector is its chosen sentences as read in the whole text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grebe.core.plan import Plan
from grebe.core.task import TaskContext
from grebe.flows import replies, shared
from grebe.flows.catalog import Flow
from grebe.flows.services import MediaFacts
from grebe.flows.settings import EmbeddingSettings, ReplyEmbeddingSettings
from grebe.flows.text_signals import sentence_spans

VERSION = "3"  # 3: sentences and summary pooled from the text's one encoder pass
# (2: the embedding is of the summary of text, OCR and transcript)
# Each plan's name: also its eligibility and its `plans.` settings key.
NAME = "post_embedding_with_summary"
FOR_REPLY_NAME = "post_embedding_with_summary_for_reply"
REASON_SUMMARY = "summary"
REPLY_CONTEXT = "{reply}\n\nIn reply to: {parent}"
#: How each part of the content enters the summary (a sentence boundary before each).
PART_HEADINGS = {"ocr": "Text in the images: {}", "transcript": "Spoken: {}"}


def central_sentences(vectors: np.ndarray, k: int) -> list[int]:
    """Indices (in text order) of the k rows closest to the normalised centroid."""
    centroid = vectors.mean(axis=0)
    norm = float(np.linalg.norm(centroid))
    if norm == 0.0:
        return list(range(min(k, len(vectors))))
    closeness = vectors @ (centroid / norm)
    return sorted(np.argsort(-closeness, kind="stable")[:k].tolist())


@dataclass(frozen=True, slots=True, eq=False)
class Summary:
    """The summary task's result: its text (the annotation's `summary` reason) and its
    vector (None when there is nothing to summarise)."""

    text: str
    vector: np.ndarray | None


async def summarize(ctx: TaskContext, text: str) -> Summary:
    settings: EmbeddingSettings = shared.settings_of(ctx)

    async def compute() -> Summary:
        spans = sentence_spans(text)
        if len(spans) <= settings.summary_sentences:  # nothing to leave out
            vector = (await shared.encoded(ctx, text)).vector if spans else None
            return Summary(" ".join(text[a:b] for a, b in spans), vector)
        encoded = await shared.encoded_sentences(ctx, text)
        ranked = min(settings.max_sentences, len(encoded.part_tokens))
        # sentences past the encoder's truncation have no tokens: nothing to rank
        candidates = [i for i in range(ranked) if encoded.part_tokens[i] > 0]
        candidates = candidates or list(range(ranked))
        picked = central_sentences(encoded.part_vectors()[candidates],
                                   settings.summary_sentences)
        chosen = [candidates[j] for j in picked]
        return Summary(" ".join(text[spans[i][0]:spans[i][1]] for i in chosen),
                       encoded.pooled(chosen))

    key = (f"summary:{settings.summary_sentences}:{settings.max_sentences}:"
           f"{shared.digest(text)}")
    found: Summary = await shared.shared(ctx, key, compute)
    if found.vector is not None:  # the encoder made it, whichever plan computed it
        ctx.output.model_versions["embedder"] = shared.services_of(ctx).models.embedder.name
    return found


def content_text(ctx: TaskContext) -> str:
    """The post's text, then its OCR text and transcript, each its own sentence(s)."""
    settings: EmbeddingSettings = shared.settings_of(ctx)
    facts: MediaFacts = ctx.results["media"]
    if not (facts.ocr_text.strip() or facts.transcript.strip()):
        return ctx.payload.post.text  # as the heads' plans encode it: one pass serves all
    parts = [ctx.payload.post.text.strip()]
    for name, value in (("ocr", facts.ocr_text), ("transcript", facts.transcript)):
        value = value.strip()[: settings.max_part_chars]
        if value:
            parts.append(PART_HEADINGS[name].format(value.rstrip(".") + "."))
    return "\n".join(p for p in parts if p)


async def summary(ctx: TaskContext) -> Summary:
    result = await summarize(ctx, content_text(ctx))
    ctx.output.reasons[REASON_SUMMARY] = result.text
    return result


async def embedding(ctx: TaskContext) -> list[float]:
    """The vector of the summary (the post text's when there is nothing to summarise)."""
    result: Summary = ctx.results["summary"]
    vector = result.vector
    if vector is None:
        vector = await shared.embed(ctx, ctx.payload.post.text)
    ctx.output.embedding = vector.tolist()
    return ctx.output.embedding


async def reply_embedding(ctx: TaskContext) -> list[float]:
    parent_summary = (await summarize(ctx, ctx.results["parent"].text)).text
    text = REPLY_CONTEXT.format(reply=ctx.payload.post.text, parent=parent_summary)
    ctx.output.embedding = (await shared.embed(ctx, text)).tolist()
    ctx.output.reasons["parent_summary"] = parent_summary
    return ctx.output.embedding


PLAN = Plan(
    NAME,
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
        "summary": ["media"],
        "embedding": ["summary"],
        "sink": ["embedding"],
    },
    eligibility=NAME,
    version=VERSION,
)

FOR_REPLY_PLAN = Plan(
    FOR_REPLY_NAME,
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
    eligibility=FOR_REPLY_NAME,
    version=VERSION,
)

FLOWS = (
    Flow(plan=PLAN, settings=EmbeddingSettings, order=60, prelude=summary),
    Flow(plan=FOR_REPLY_PLAN, settings=ReplyEmbeddingSettings, order=61),
)
