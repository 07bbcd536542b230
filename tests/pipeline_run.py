"""Run the whole pipeline over what is queued, for end-to-end tests: start the Runtime,
wait until every message was processed, and stop it with nothing left in flight."""

from __future__ import annotations

from grebe.app.supervisor import Runtime
from grebe.config import GrebeConfig


async def run_until_caught_up(config: GrebeConfig) -> None:
    runtime = Runtime(config)
    await runtime.start()
    await runtime.wait_caught_up()
    assert await runtime.stop() is True, "the runtime stopped with posts still in flight"
