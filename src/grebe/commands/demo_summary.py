"""What a demo run found: per-flow counts, labels and latencies, and the totals.

Data only, so the runner (demo.py), the HTML report (report.py) and the terminal output
(console.py) all import it and none of them imports another."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from grebe.commands.demo_set import DemoPost
from grebe.core.plan import PlanResult
from grebe.types import Annotation, TaskStatus


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


@dataclass
class BasicSummary:
    """`grebe demo --basic`: the bundled sample through the `basic` plan."""

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
