"""`grebe demo`: the bundled sample through the whole runtime, end to end, then a summary.

It ingests src/grebe/data/sample_posts.jsonl (a few lines are malformed on purpose, a few
are JSON but not posts) into a fresh data directory, runs the real runtime — local broker,
dispatcher, an engine process, the `basic` plan, the SQLite annotation store — until
every message is committed, and reports what happened.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from grebe import constants as C
from grebe.app.supervisor import Runtime
from grebe.brokers.factory import local_dead_letter_count, local_log
from grebe.brokers.local import LocalProducer
from grebe.config import GrebeConfig, load_config
from grebe.ingest import IngestReport, ingest, read_lines
from grebe.stores.sqlite import SqliteStore

DEMO_STREAM = "posts"


def sample_path() -> Path:
    return Path(str(resources.files("grebe").joinpath("data/sample_posts.jsonl")))


@dataclass
class DemoSummary:
    data_dir: Path
    lines: int
    ingested: int
    rejected_at_ingest: int
    annotated: int
    skipped: int  # acked without an annotation (no text)
    dead_lettered: int
    startup_s: float
    processing_s: float
    ingest_errors: list[tuple[int, str]]

    @property
    def posts_per_s(self) -> float:
        return self.ingested / self.processing_s if self.processing_s > 0 else 0.0


def demo_config(data_dir: Path, **overrides: Any) -> GrebeConfig:
    settings: dict[str, Any] = {
        "data_dir": data_dir,
        "streams": [{"name": DEMO_STREAM, "eligibilities": [C.BASIC_ELIGIBILITY]}],
        "metrics": {"enabled": False},
        "engine": {"processes": 1},
        "dispatcher": {"backoff_base_s": 0.01, "backoff_max_s": 0.1},
    }
    settings.update(overrides)
    return load_config(**settings)


async def run_demo(
    data_dir: Path | None = None, sample: Path | None = None, **overrides: Any
) -> DemoSummary:
    data_dir = Path(data_dir or tempfile.mkdtemp(prefix="grebe-demo-"))
    config = demo_config(data_dir, **overrides)
    stream = config.streams[0]

    producer = LocalProducer(local_log(config))
    await producer.start()
    try:
        lines = list(read_lines(sample or sample_path()))
        report: IngestReport = await ingest(lines, producer, stream.topic, validate=False)
    finally:
        await producer.stop()

    runtime = Runtime(config)
    started = time.perf_counter()
    await runtime.start()
    ready = time.perf_counter()
    try:
        await runtime.wait_caught_up()
        done = time.perf_counter()
    finally:
        await runtime.stop()

    store = SqliteStore(config.sqlite_path)
    await store.start()
    annotated = await store.count()
    await store.stop()
    dead = await local_dead_letter_count(config)
    return DemoSummary(
        data_dir=data_dir, lines=len(lines), ingested=report.accepted,
        rejected_at_ingest=report.rejected, annotated=annotated,
        skipped=report.accepted - annotated - dead, dead_lettered=dead,
        startup_s=ready - started, processing_s=done - ready, ingest_errors=report.errors,
    )
