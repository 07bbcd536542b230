"""Batch jobs over the real runtime: publish, run until caught up, stop.

The demo (both modes) and `grebe eval` measure what production does, so they do not
re-implement processing: they put messages on the configured brokers, start the same
`Runtime` that `grebe run` starts, wait until every message in the topics at that moment
is committed, and stop. This module is that one sequence, with its timings and the
dead-letter tally, so the jobs differ only in what they publish and what they read back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from grebe.app.supervisor import Runtime
from grebe.brokers.factory import build_ingest_producer, local_dead_letter_count, local_log
from grebe.config import GrebeConfig

PROGRESS_REFRESH_S = 0.25  # how often progress re-reads the committed offsets

#: One message: (key, encoded envelope or raw line).
Record = tuple[bytes | None, bytes]


@dataclass(frozen=True)
class CaughtUp:
    """How a run went: engine start-up (models load here), processing, dead letters."""

    startup_s: float
    processing_s: float
    dead_lettered: int


async def publish(config: GrebeConfig, records: Mapping[str, Iterable[Record]]) -> None:
    """Append `records` (topic -> messages) on the broker of the stream reading each topic,
    one producer per topic, stopped even when a publish fails."""
    for topic, batch in records.items():
        producer = build_ingest_producer(config, topic)
        await producer.start()
        try:
            await producer.publish_many(topic, list(batch))
        finally:
            await producer.stop()


async def committed_messages(config: GrebeConfig) -> int:
    """Messages committed so far over every stream (local log: the jobs' scratch broker)."""
    log = local_log(config)
    await log.open()
    try:
        return await _committed(log, config)
    finally:
        await log.close()


async def _committed(log: Any, config: GrebeConfig) -> int:
    total = 0
    for stream in config.streams:
        total += sum((await log.committed(stream.group, stream.topic)).values())
    return total


async def run_until_caught_up(
    config: GrebeConfig, *, on_progress: Callable[[int], None] | None = None,
    refresh_s: float = PROGRESS_REFRESH_S,
) -> CaughtUp:
    """Start the runtime, wait until everything in the topics now is committed, stop.

    `on_progress(committed)` is called every `refresh_s` while the runtime works (it reads
    the local log's committed offsets, through one connection kept open meanwhile, so it
    needs local-broker streams)."""
    runtime = Runtime(config)
    started = time.perf_counter()
    await runtime.start()
    ready = time.perf_counter()
    try:
        await _wait(runtime, config, on_progress, refresh_s)
        done = time.perf_counter()
    finally:
        await runtime.stop()
    return CaughtUp(startup_s=ready - started, processing_s=done - ready,
                    dead_lettered=await local_dead_letter_count(config))


async def _wait(runtime: Runtime, config: GrebeConfig,
                on_progress: Callable[[int], None] | None, refresh_s: float) -> None:
    if on_progress is None:
        await runtime.wait_caught_up()
        return
    log = local_log(config)
    await log.open()
    caught_up = asyncio.ensure_future(runtime.wait_caught_up())
    try:
        while not caught_up.done():
            on_progress(await _committed(log, config))
            await asyncio.wait({caught_up}, timeout=refresh_s)
        await caught_up
    finally:
        caught_up.cancel()
        await log.close()
