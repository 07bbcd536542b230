"""Multimodal embeddings: mm_emb_v5, its for-reply variant, and the older mm_emb_v4.

No packaged model embeds images and text together (see MODELS.md), so media reaches the
embedding as text: OCR of images and frames, and the video transcript.
- v5 embeds each part (post text, OCR text, transcript, and for replies the parent text)
  separately and fuses them by a weighted mean (`weights`), renormalised; missing parts
  drop out and the rest are reweighted. The transcript is kept on the annotation.
- v4 embeds the post text and the OCR text concatenated, once (no transcript).
"""

from __future__ import annotations

import numpy as np

from grebe.core.plan import Plan
from grebe.core.task import TaskContext
from grebe.flows import replies, shared
from grebe.flows.catalog import Flow
from grebe.flows.settings import MultimodalSettings, ReplyMultimodalSettings
from grebe.flows.sinks import SinkRules, sink_with

VERSION_V5 = "5"
VERSION_V4 = "4"
# Each plan's name: also its eligibility and its `plans.` settings key.
V5_NAME = "mm_emb_v5"
V5_FOR_REPLY_NAME = "mm_emb_v5_for_reply"
V4_NAME = "mm_emb_v4"
REASON_PARTS = "parts"


def fuse(parts: dict[str, np.ndarray], weights: dict[str, float]) -> np.ndarray:
    """Weighted mean of unit vectors, renormalised to unit length."""
    total = sum(weights.get(name, 0.0) for name in parts)
    if not parts or total <= 0:
        raise ValueError("nothing to fuse: no part with a positive weight")
    fused = np.sum([weights.get(name, 0.0) * vector for name, vector in parts.items()], axis=0)
    norm = float(np.linalg.norm(fused))
    return fused / norm if norm else fused


async def part_texts(ctx: TaskContext) -> dict[str, str]:
    """The non-empty texts standing for each modality, clipped to max_chars."""
    settings: MultimodalSettings = shared.settings_of(ctx)
    facts = ctx.results["media"]
    texts = {"text": ctx.payload.post.text, "ocr": facts.ocr_text,
             "transcript": facts.transcript}
    if "parent" in ctx.results:
        texts["parent"] = ctx.results["parent"].text
    return {k: v.strip()[: settings.max_chars] for k, v in texts.items() if v and v.strip()}


async def fused_v5(ctx: TaskContext) -> list[float]:
    settings: MultimodalSettings = shared.settings_of(ctx)
    texts = {k: v for k, v in ctx.results["parts"].items() if settings.weights.get(k, 0) > 0}
    if not texts:
        raise ValueError("post has no text, OCR text or transcript to embed")
    vectors = {name: await shared.embed(ctx, text) for name, text in texts.items()}
    ctx.output.embedding = fuse(vectors, settings.weights).tolist()
    ctx.output.reasons[REASON_PARTS] = ",".join(vectors)
    return ctx.output.embedding


async def concatenated_v4(ctx: TaskContext) -> list[float]:
    parts = ctx.results["parts"]
    used = [k for k in ("text", "ocr") if k in parts]
    if not used:
        raise ValueError("post has no text or OCR text to embed")
    vector = await shared.embed(ctx, "\n".join(parts[k] for k in used))
    ctx.output.embedding = vector.tolist()
    ctx.output.reasons[REASON_PARTS] = ",".join(used)
    ctx.output.transcript = None  # v4 predates transcripts
    return ctx.output.embedding


def _plan(name: str, fuse_task: object, version: str, *,
          for_reply: bool = False, sink_rules: SinkRules | None = None) -> Plan:
    """The three variants share one shape; the for-reply one also needs the parent."""
    tasks = {
        "filter": shared.filters,
        "rate_limit": shared.rate_limit,
        "media": shared.media_task,
        "parts": part_texts,
        "embedding": fuse_task,
        "sink": sink_with(sink_rules or SinkRules()),
    }
    deps = {
        "rate_limit": ["filter"],
        "media": ["parent" if for_reply else "rate_limit"],
        "parts": ["media"],
        "embedding": ["parts"],
        "sink": ["embedding"],
    }
    if for_reply:
        tasks["parent"] = replies.parent
        deps["parent"] = ["rate_limit"]
    return Plan(name, tasks=tasks, deps=deps,  # type: ignore[arg-type]
                eligibility=name, version=version)


# Grox's v5 sink skips the output topic for replies (the store still has them); the
# for-reply variant publishes.
PLAN = _plan(V5_NAME, fused_v5, VERSION_V5,
             sink_rules=SinkRules(publish_replies=False))
FOR_REPLY_PLAN = _plan(V5_FOR_REPLY_NAME, fused_v5, VERSION_V5, for_reply=True)
V4_PLAN = _plan(V4_NAME, concatenated_v4, VERSION_V4)

FLOWS = (
    Flow(plan=PLAN, settings=MultimodalSettings, order=70, prelude=shared.text_embedding),
    Flow(plan=FOR_REPLY_PLAN, settings=ReplyMultimodalSettings, order=71),
    Flow(plan=V4_PLAN, settings=MultimodalSettings, order=72),
)
