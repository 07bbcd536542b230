"""`judge.verdicts` once per payload, text, gate and thresholds, whichever plan asks.

The spam, safety and PTOS plans all judge the same post text (and the same media text),
some of them from several tasks: 14.6 `judge.verdicts` calls a post through the six
default flows, each walking every head, its language gate and its thresholds again
(8% of the engine's event loop thread under py-spy, bench/realflows_engine.py). The
verdicts depend only on the text, the gate, the payload's language and the plan's
`head_thresholds`, so plans whose thresholds agree share one computation through the
payload memo (one asyncio task per distinct key, awaited by every caller).

What the computation writes into its plan's output (the model versions it read) is
captured apart and copied into each caller's output, so every plan's annotation names
the same models as when it judged the text itself. grebe.flows.judge keeps its API; this
module only decides when to call it.
"""

from __future__ import annotations

from dataclasses import replace

from grebe.core.task import PlanOutput, TaskContext
from grebe.flows import judge
from grebe.flows.shared import digest, settings_of
from grebe.identity_cache import IdentityCache

KEY_VERDICTS = "verdicts"


#: The key part of each plan's threshold overrides, by the overrides' identity, with a
#: copy to tell a changed dict (comparing dicts costs ~1/50 of the repr; this is
#: asked ~7 times a post).
_KEYS: IdentityCache[dict[str, float], str] = IdentityCache(256, snapshot=dict)


def _overrides_key(overrides: dict[str, float]) -> str:
    return repr(sorted(overrides.items()))


def _thresholds_key(ctx: TaskContext) -> str:
    """The plan's threshold overrides as part of the key: two plans share verdicts only
    when the policy gives them the same thresholds (most plans set none)."""
    overrides = settings_of(ctx).head_thresholds
    return _KEYS.get(overrides, _overrides_key) if overrides else ""


async def verdicts(ctx: TaskContext, text: str, *, gate: bool = True) -> dict[str, judge.Verdict]:
    """`judge.verdicts(ctx, text, gate=gate)`, computed once per payload and key. The
    caller gets its own dict (the verdicts themselves are frozen)."""
    if ctx.services.models.heads is None or not text.strip():
        return await judge.verdicts(ctx, text, gate=gate)  # nothing to share: {} at once
    key = f"{KEY_VERDICTS}:{int(gate)}:{_thresholds_key(ctx)}:{digest(text)}"

    async def compute() -> tuple[dict[str, judge.Verdict], PlanOutput]:
        written = PlanOutput([], {}, {})
        found = await judge.verdicts(replace(ctx, output=written), text, gate=gate)
        return found, written

    found, written = await ctx.memo.get_or_compute(key, compute)
    _copy_into(ctx.output, written)
    return dict(found)


def _copy_into(output: PlanOutput, written: PlanOutput) -> None:
    """What the shared computation wrote into its output, into this caller's."""
    output.model_versions.update(written.model_versions)
    if written.labels:
        output.labels.extend(label for label in written.labels if label not in output.labels)
    output.scores.update(written.scores)
    output.reasons.update(written.reasons)
