"""Shared work done once per post: every flow on the same posts with the real local text
models, with the per-payload memo + TTL cache (how grebe runs) against a baseline where
each plan computes its own embeddings and scores (no sharing), in the same process.

    .venv/bin/python bench/flows.py [N_POSTS]

Prints posts/s for both and the ratio. No media (that would only widen the gap: a
post's image would be fetched, OCR'd and classified once instead of up to ten times).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from grebe.commands.demo_set import messages
from grebe.config import load_config
from grebe.core.memo import PayloadMemo
from grebe.core.planmaster import PlanMaster
from grebe.flows import catalog, registry
from grebe.flows.models import build_models
from grebe.flows.settings import FlowSettings
from grebe.stores.base import MemoryStore
from grebe.types import Post, TaskPayload, UserContext

ALL = catalog.eligibilities()


class NoCache:
    """The baseline: every call computes."""

    async def get_or_compute(self, key: Any, factory: Any) -> Any:
        return await factory()


def payloads(n: int, tag: str, offset: int = 0) -> list[TaskPayload]:
    """n replies with distinct texts (and distinct parents), starting at `offset`."""
    texts = [str(m["text"]) for m in messages()]
    out = []
    for i in range(offset, offset + n):
        parent = Post(id=f"{tag}-parent-{i}", author_id="p", text=texts[(i + n) % len(texts)])
        post = Post(id=f"{tag}-{i}", author_id=f"a{i}", text=texts[i % len(texts)],
                    reply_to_post_id=parent.id)
        out.append(TaskPayload(payload_id=post.id, post=post, eligibilities=ALL,
                               context=UserContext(parent=parent)))
    return out


async def shared_run(master: PlanMaster, batch: list[TaskPayload]) -> None:
    await asyncio.gather(*(master.run(p) for p in batch))


async def unshared_run(master: PlanMaster, batch: list[TaskPayload]) -> None:
    async def one(payload: TaskPayload) -> None:
        # Each plan with its own memo: nothing computed by one plan helps another.
        await asyncio.gather(*(plan.run(payload, services=master.services, memo=PayloadMemo())
                               for plan in master.eligible(payload)))

    await asyncio.gather(*(one(p) for p in batch))


async def main(n: int) -> None:
    settings = FlowSettings.from_section({"defaults": {"dedupe_ttl_s": 0}})
    models = build_models(load_config(), settings)
    for component in models.components():
        await component.start()
    try:
        shared = registry.assemble(settings, models=models, store=MemoryStore())
        baseline = registry.assemble(settings, models=models, store=MemoryStore())
        baseline.cache = NoCache()
        warm = payloads(4, "warm", offset=200)
        await shared_run(PlanMaster(registry.PLANS, services=shared), warm)
        figures = {}
        for name, services, run in (("shared (memo + TTL cache)", shared, shared_run),
                                    ("baseline (no sharing)", baseline, unshared_run)):
            master = PlanMaster(registry.PLANS, services=services)
            batch = payloads(n, name[:4])
            started = time.perf_counter()
            await run(master, batch)
            figures[name] = n / (time.perf_counter() - started)
            print(f"{name:28s} {figures[name]:7.2f} posts/s (10 plans each)")
        a, b = figures.values()
        print(f"ratio shared / baseline      {a / b:7.2f}x")
    finally:
        for component in reversed(models.components()):
            await component.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("posts", type=int, nargs="?", default=40, help="reply posts (40)")
    asyncio.run(main(parser.parse_args().posts))
