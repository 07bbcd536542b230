"""A plans factory for the selection tests: the built-in `basic` plan with one more
task that writes the payload's mode into the annotation (`reasons["mode"]`), so a test
can see what mode reached the plans in an engine process.

    plans: {factory: "tests.selection.mode_plan:build_bundle"}
"""

from __future__ import annotations

from grebe import constants as C
from grebe.config import GrebeConfig
from grebe.core.bundle import PlanBundle
from grebe.core.plan import Plan
from grebe.core.task import TaskContext
from grebe.flows import basic

MODE_KEY = "mode"


async def record_mode(ctx: TaskContext) -> None:
    ctx.output.reasons[MODE_KEY] = ctx.payload.mode


def build_bundle(config: GrebeConfig) -> PlanBundle:
    bundle = basic.build_bundle(config)
    bundle.plans = [Plan(
        "basic",
        {"filter": basic.filter_text, "stats": basic.text_stats, "mode": record_mode,
         "sink": basic.sink},
        {"stats": ["filter"], "mode": ["stats"], "sink": ["mode"]},
        eligibility=C.BASIC_ELIGIBILITY, version=basic.VERSION,
    )]
    return bundle
