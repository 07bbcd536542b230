"""`grebe demo`: the main job on one machine with no servers.

It builds the demo set (grebe.flows.demo_set), ingests it into the local broker, runs
the real runtime — the sixteen seed streams of default.yaml, the dispatcher, every flow
with the local models, the SQLite annotation store — until every message is committed,
then summarises per flow (counts, labels, p50/p95 latency, posts/s) and writes an HTML
report. Annotations stay queryable with `grebe annotations POST_ID`.

Plans run in this process (engine.processes = 0): on a laptop that saves loading every
model twice, and it lets the demo time each plan run (`TimedPlan`) for the summary.
"""

from __future__ import annotations

import asyncio
import copy
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from grebe import codec
from grebe.config import GrebeConfig, load_config
from grebe.core.bundle import PlanBundle
from grebe.core.plan import Plan, PlanResult
from grebe.flows.demo_set import DemoPost, build_demo_set, skimage_dir
from grebe.types import Annotation, TaskPayload, TaskStatus

DEMO_FACTORY = "grebe.flows.demo:build_demo_bundle"
REPORT_NAME = "report.html"
PROGRESS_REFRESH_S = 0.25  # how often the progress bar re-reads committed offsets


@dataclass
class PlanRun:
    plan: str
    status: TaskStatus
    duration_s: float


@dataclass
class Recorder:
    """Plan runs seen by this process (the demo runs plans in-process)."""

    runs: list[PlanRun] = field(default_factory=list)

    def add(self, result: PlanResult) -> None:
        self.runs.append(PlanRun(result.plan, result.status,
                                 result.finished_at - result.started_at))


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


def default_config_raw() -> dict[str, Any]:
    return yaml.safe_load((resources.files("grebe") / "data" / "default.yaml").read_text())


def demo_config(data_dir: Path, media_dir: Path, **overrides: Any) -> GrebeConfig:
    raw = copy.deepcopy(default_config_raw())
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


@dataclass
class FlowStats:
    plan: str
    runs: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    labels: Counter[str] = field(default_factory=Counter)
    durations: list[float] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        if not self.durations:
            return 0.0
        if len(self.durations) == 1:
            return self.durations[0]
        return statistics.quantiles(self.durations, n=100, method="inclusive")[int(q) - 1]


@dataclass
class DemoSummary:
    data_dir: Path
    messages: int
    posts: int
    annotations: int
    dead_lettered: int
    startup_s: float
    processing_s: float
    flows: dict[str, FlowStats]
    report: Path
    examples: dict[str, list[tuple[DemoPost, Annotation]]]

    spam_confusion: Counter[str] = field(default_factory=Counter)  # tp/fp/fn/tn vs corpus

    @property
    def posts_per_s(self) -> float:
        return self.posts / self.processing_s if self.processing_s > 0 else 0.0

    def spam_agreement(self) -> str:
        """spam_comment against the corpus' own spam/ham labels. Optimistic: the spam
        head was trained on 80% of the same corpus (the demo cuts messages to 280
        characters, so they are not the exact training texts)."""
        c = self.spam_confusion
        if not c:
            return "no corpus messages went through spam_comment"
        precision = c["tp"] / max(1, c["tp"] + c["fp"])
        recall = c["tp"] / max(1, c["tp"] + c["fn"])
        return (f"spam_comment vs corpus labels on {sum(c.values())} messages: precision "
                f"{precision:.2f}, recall {recall:.2f} (tp {c['tp']}, fp {c['fp']}, "
                f"fn {c['fn']}, tn {c['tn']})")


async def _ingest(config: GrebeConfig, demo: list[DemoPost]) -> None:
    from grebe.brokers.factory import local_log
    from grebe.brokers.local import LocalProducer

    by_topic: dict[str, list[tuple[bytes | None, bytes]]] = defaultdict(list)
    for item in demo:
        by_topic[item.topic].append((item.post.id.encode(), codec.encode(item.envelope)))
    producer = LocalProducer(local_log(config))
    await producer.start()
    try:
        for topic, records in by_topic.items():
            await producer.publish_many(topic, records)
    finally:
        await producer.stop()


async def _committed(log: Any, config: GrebeConfig) -> int:
    total = 0
    for stream in config.streams:
        total += sum((await log.committed(stream.group, stream.topic)).values())
    return total


async def run_demo(
    data_dir: Path | None = None, *, on_progress: Callable[[int, int], None] | None = None,
    **overrides: Any,
) -> DemoSummary:
    """Build, ingest, process, summarise. `on_progress(done, total)` is called while
    the runtime works (messages committed so far)."""
    from grebe.app.supervisor import Runtime
    from grebe.brokers.factory import local_log
    from grebe.flows.report import write_report
    from grebe.stores.sqlite import iter_all

    data_dir = Path(data_dir or tempfile.mkdtemp(prefix="grebe-demo-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    media_dir = data_dir / "media"
    demo = await asyncio.to_thread(build_demo_set, media_dir, time.time())
    config = demo_config(data_dir, media_dir, **overrides)
    await _ingest(config, demo)
    RECORDER.runs.clear()

    runtime = Runtime(config)
    started = time.perf_counter()
    await runtime.start()
    ready = time.perf_counter()
    log = local_log(config)
    await log.open()
    try:
        caught_up = asyncio.ensure_future(runtime.wait_caught_up())
        while not caught_up.done():
            if on_progress is not None:
                on_progress(await _committed(log, config), len(demo))
            await asyncio.wait({caught_up}, timeout=PROGRESS_REFRESH_S)
        await caught_up
        done = time.perf_counter()
        if on_progress is not None:
            on_progress(len(demo), len(demo))
        dead = sum((await log.end_offsets(config.dispatcher.dead_letter_topic)).values())
    finally:
        await log.close()
        await runtime.stop()

    annotations = await asyncio.to_thread(lambda: list(iter_all(config.sqlite_path)))
    flows: dict[str, FlowStats] = {}
    for run in RECORDER.runs:
        stats = flows.setdefault(run.plan, FlowStats(run.plan))
        stats.runs += 1
        stats.statuses[run.status.value] += 1
        stats.durations.append(run.duration_s)
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
    confusion: Counter[str] = Counter()
    for item, annotation in examples.get("spam_comment", []):
        if item.kind in ("spam", "ham"):
            flagged = "spam" in annotation.labels
            truth = item.kind == "spam"
            confusion[("t" if flagged == truth else "f") + ("p" if flagged else "n")] += 1
    report = data_dir / REPORT_NAME
    summary = DemoSummary(
        data_dir=data_dir, messages=len(demo), posts=len(by_id), annotations=len(annotations),
        dead_lettered=dead, startup_s=ready - started, processing_s=done - ready,
        flows=dict(sorted(flows.items())), report=report, examples=dict(examples),
        spam_confusion=confusion,
    )
    await asyncio.to_thread(write_report, summary, report)
    return summary
