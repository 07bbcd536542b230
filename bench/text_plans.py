"""CPU ms per post of the text-judging plans (spam_comment, post_safety, safety_ptos)
with the local models this build has: the trained heads on one shared embedding when
grebe.inference.heads ships, else the pre-heads models (e-mail spam head, profanity,
HateSonar). The cross-post cache is off, so every post pays its own model passes.

    .venv/bin/python bench/text_plans.py [ROUNDS]   # ROUNDS x the 64-post sanity set
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from grebe.config import load_config
from grebe.core.planmaster import PlanMaster
from grebe.flows import registry
from grebe.flows.models import build_models
from grebe.flows.settings import FlowSettings
from grebe.stores.base import MemoryStore
from grebe.types import Post, TaskPayload

DATA = Path(__file__).parent.parent / "tests" / "flows" / "data" / "sanity_edges.jsonl"
PLANS = frozenset({"spam_comment", "post_safety", "safety_ptos"})
LINES = DATA.read_text().splitlines()

async def main(n_rounds: int) -> None:
    """Load the models, warm up, then time n_rounds over the sanity set."""
    config = load_config(inference={"ocr": "none", "nsfw": "none", "transcriber": "none"})
    settings = FlowSettings.from_section({"defaults": {"dedupe_ttl_s": 0},
                                          "shared_cache": {"maxsize": 1, "ttl_s": 0.001}})
    models = build_models(config, settings)
    services = registry.assemble(settings, models=models, store=MemoryStore())
    for c in models.components():
        await c.start()
    master = PlanMaster(registry.PLANS, services=services)
    texts = [json.loads(line)["text"] for line in LINES if line.strip()]

    async def run(i: int, t: str) -> None:
        post = Post(id=f"b{i}", author_id=f"a{i}", text=f"{t} #{i}")
        await master.run_plans(TaskPayload(payload_id=post.id, post=post, eligibilities=PLANS))
    for i, t in enumerate(texts[:8]):  # warm up
        await run(-i - 1, t)
    cpu, wall = time.process_time(), time.perf_counter()
    count = 0
    for r in range(n_rounds):
        for i, t in enumerate(texts):
            await run(r * 1000 + i, t)
            count += 1
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(f"heads={'yes' if models.heads else 'no'} posts={count} "
          f"cpu_ms_per_post={cpu / count * 1000:.1f} wall_ms_per_post={wall / count * 1000:.1f}")
    for c in reversed(models.components()):
        await c.stop()

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rounds", type=int, nargs="?", default=2,
                        help="times through the 64-post sanity set (2)")
    asyncio.run(main(parser.parse_args().rounds))
