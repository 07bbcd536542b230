"""`grebe demo`: the main job on one machine with no servers.

The full demo builds the demo set (grebe.commands.demo_set), ingests it into the local
broker, runs the real runtime — the sixteen seed streams of default.yaml, the
dispatcher, every flow with the local models, the SQLite annotation store — until every
message is committed, then summarises per flow (counts, labels, p50/p95 latency,
posts/s) and writes an HTML report. Annotations stay queryable with `grebe annotations
POST_ID` (with GREBE_DATA_DIR set to the demo's data dir).

Plans run in this process (engine.processes = 0): on a laptop that saves loading every
model twice, and it lets the demo time each plan run (`TimedPlan`) for the summary.

`--basic` is the runtime's smoke test: the bundled sample (a few lines malformed on
purpose, a few JSON but not posts) through the `basic` plan, no models. Both modes run
through `catchup.run_until_caught_up`, as `grebe eval` does.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from grebe import codec
from grebe import constants as C
from grebe.commands.catchup import Record, publish, run_until_caught_up
from grebe.commands.demo_set import DemoPost, build_demo_set, skimage_dir
from grebe.commands.demo_summary import BasicSummary, DemoSummary, FlowStats, Recorder
from grebe.commands.report import write_report
from grebe.commands.startup import packaged_config_raw
from grebe.config import GrebeConfig, load_config
from grebe.core.bundle import PlanBundle
from grebe.core.plan import Plan, PlanResult
from grebe.types import Annotation, TaskPayload

DEMO_FACTORY = "grebe.commands.demo:build_demo_bundle"
REPORT_NAME = "report.html"
BASIC_STREAM = "posts"
BASIC_SAMPLE = "data/sample_posts.jsonl"
DATA_DIR_PREFIX = "grebe-demo-"

RECORDER = Recorder()


class TimedPlan:
    """A plan that reports each run to the recorder; PlanMaster sees a Plan."""

    def __init__(self, plan: Plan, recorder: Recorder) -> None:
        self._plan, self._recorder = plan, recorder
        self.name, self.eligibility, self.version = plan.name, plan.eligibility, plan.version

    def apply_default_timeout(self, task_timeout_s: float) -> None:
        self._plan.apply_default_timeout(task_timeout_s)

    async def run(self, payload: TaskPayload, **kwargs: Any) -> PlanResult:
        result = await self._plan.run(payload, **kwargs)
        self._recorder.add(result)
        return result


def build_demo_bundle(config: GrebeConfig) -> PlanBundle:
    from grebe.flows.registry import build_bundle

    bundle = build_bundle(config)
    bundle.plans = [TimedPlan(p, RECORDER) for p in bundle.plans]  # type: ignore[misc]
    return bundle


def demo_config(data_dir: Path, media_dir: Path, **overrides: Any) -> GrebeConfig:
    raw = packaged_config_raw()
    raw["plans"]["factory"] = DEMO_FACTORY
    raw.update({
        "data_dir": data_dir,
        "metrics": {"enabled": False},
        # In-process plans, and a bounded number of posts in flight so each post's
        # latency is its own work, not a queue behind four hundred others.
        "engine": {"processes": 0, "concurrency": 16},
        "dispatcher": {"max_in_flight": 16, "backoff_base_s": 0.05, "backoff_max_s": 0.5},
        "media": {"fetch": {"allow_files": True,
                            "file_roots": [str(skimage_dir()), str(media_dir)]}},
    })
    raw.update(overrides)
    return load_config(**raw)


def _data_dir(data_dir: Path | None) -> Path:
    path = Path(data_dir or tempfile.mkdtemp(prefix=DATA_DIR_PREFIX))
    path.mkdir(parents=True, exist_ok=True)
    return path


async def run_demo(
    data_dir: Path | None = None, *, on_progress: Callable[[int, int], None] | None = None,
    **overrides: Any,
) -> DemoSummary:
    """Build, ingest, process, summarise. `on_progress(done, total)` is called while
    the runtime works (messages committed so far)."""
    from grebe.stores.sqlite import iter_all

    data_dir = _data_dir(data_dir)
    media_dir = data_dir / "media"
    demo = await asyncio.to_thread(build_demo_set, media_dir, time.time())
    config = demo_config(data_dir, media_dir, **overrides)
    by_topic: dict[str, list[Record]] = defaultdict(list)
    for item in demo:
        by_topic[item.topic].append((item.post.id.encode(), codec.encode(item.envelope)))
    await publish(config, by_topic)
    RECORDER.runs.clear()
    run = await run_until_caught_up(
        config, on_progress=None if on_progress is None else (
            lambda done: on_progress(done, len(demo))))
    if on_progress is not None:
        on_progress(len(demo), len(demo))

    annotations = await asyncio.to_thread(lambda: list(iter_all(config.sqlite_path)))
    flows: dict[str, FlowStats] = {}
    for plan_run in RECORDER.runs:
        stats = flows.setdefault(plan_run.plan, FlowStats(plan_run.plan))
        stats.runs += 1
        stats.statuses[plan_run.status.value] += 1
        stats.durations.append(plan_run.duration_s)
    # Only the plans' own verdicts: the store also holds post/user records and
    # enforcement history that plans write beside them (flows/sinks.py, ptos_depth.py).
    annotations = [a for a in annotations if a.producer in flows]
    for annotation in annotations:
        flows[annotation.producer].labels.update(annotation.labels)
    by_id = {item.post.id: item for item in demo}
    examples: dict[str, list[tuple[DemoPost, Annotation]]] = defaultdict(list)
    for annotation in annotations:
        if annotation.post_id in by_id:
            examples[annotation.producer].append((by_id[annotation.post_id], annotation))
    report = data_dir / REPORT_NAME
    summary = DemoSummary(
        data_dir=data_dir, messages=len(demo), posts=len(by_id), annotations=len(annotations),
        dead_lettered=run.dead_lettered, startup_s=run.startup_s,
        processing_s=run.processing_s, flows=dict(sorted(flows.items())), report=report,
        examples=dict(examples), spam_confusion=_spam_confusion(examples),
    )
    await asyncio.to_thread(write_report, summary, report)
    return summary


def _spam_confusion(examples: dict[str, list[tuple[DemoPost, Annotation]]]) -> Counter[str]:
    """spam_comment's verdicts on corpus messages against the corpus' own labels."""
    confusion: Counter[str] = Counter()
    for item, annotation in examples.get("spam_comment", []):
        if item.kind in ("spam", "ham"):
            flagged = "spam" in annotation.labels
            truth = item.kind == "spam"
            confusion[("t" if flagged == truth else "f") + ("p" if flagged else "n")] += 1
    return confusion


def sample_path() -> Path:
    """The bundled sample of `--basic`."""
    return Path(str(resources.files("grebe").joinpath(BASIC_SAMPLE)))


def basic_config(data_dir: Path, **overrides: Any) -> GrebeConfig:
    settings: dict[str, Any] = {
        "data_dir": data_dir,
        "streams": [{"name": BASIC_STREAM, "eligibilities": [C.BASIC_ELIGIBILITY]}],
        "metrics": {"enabled": False},
        "engine": {"processes": 1},
        "dispatcher": {"backoff_base_s": 0.01, "backoff_max_s": 0.1},
    }
    settings.update(overrides)
    return load_config(**settings)


async def run_basic_demo(
    data_dir: Path | None = None, sample: Path | None = None, **overrides: Any
) -> BasicSummary:
    """The sample through the real runtime and the `basic` plan (an engine process, the
    SQLite store), every line as it is: malformed lines are rejected at ingest, JSON that
    is not a post is dead-lettered by the dispatcher."""
    from grebe.brokers.factory import build_ingest_producer
    from grebe.commands.ingest import ingest, read_lines
    from grebe.stores.sqlite import SqliteStore

    data_dir = _data_dir(data_dir)
    config = basic_config(data_dir, **overrides)
    topic = config.streams[0].topic
    producer = build_ingest_producer(config, topic)
    await producer.start()
    try:
        lines = list(read_lines(sample or sample_path()))
        report = await ingest(lines, producer, topic, validate=False)
    finally:
        await producer.stop()
    run = await run_until_caught_up(config)
    store = SqliteStore(config.sqlite_path)
    await store.start()
    try:
        annotated = await store.count()
    finally:
        await store.stop()
    return BasicSummary(
        data_dir=data_dir, lines=len(lines), ingested=report.accepted,
        rejected_at_ingest=report.rejected, annotated=annotated,
        skipped=report.accepted - annotated - run.dead_lettered,
        dead_lettered=run.dead_lettered, startup_s=run.startup_s,
        processing_s=run.processing_s, ingest_errors=report.errors,
    )
