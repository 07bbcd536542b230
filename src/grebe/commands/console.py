"""Terminal output of `grebe demo`, `grebe analyze` and `grebe eval` (rich), kept out of
the CLI so each command there stays a thin shell."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

if TYPE_CHECKING:
    from grebe.commands.demo_summary import BasicSummary, DemoSummary
    from grebe.config import GrebeConfig
    from grebe.core.plan import PlanResult

SCORE_LIMIT = 8  # scores shown per flow in analyze's table


def demo_command(data_dir: Path | None, console: Console) -> DemoSummary:
    from grebe.commands.demo import run_demo

    logging.getLogger("grebe").setLevel(logging.ERROR)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("building the demo set and loading models", total=None)

        def on_progress(done: int, total: int) -> None:
            progress.update(task, description="running every flow", completed=done,
                            total=total)

        summary = asyncio.run(run_demo(data_dir, on_progress=on_progress))
    print_demo(summary, console)
    return summary


def basic_demo_command(data_dir: Path | None, console: Console) -> BasicSummary:
    """`grebe demo --basic`: the sample through the `basic` plan, then a table."""
    from grebe.commands.demo import run_basic_demo

    with console.status("running the sample through the pipeline..."):
        summary = asyncio.run(run_basic_demo(data_dir))
    table = Table(title="grebe demo")
    table.add_column("")
    table.add_column("", justify="right")
    for name, value in (
        ("sample lines", summary.lines),
        ("rejected at ingest (malformed)", summary.rejected_at_ingest),
        ("ingested", summary.ingested),
        ("annotated", summary.annotated),
        ("skipped (no text)", summary.skipped),
        ("dead-lettered", summary.dead_lettered),
        ("engine start-up", f"{summary.startup_s:.2f} s"),
        ("processing", f"{summary.processing_s:.2f} s"),
        ("posts/s", f"{summary.posts_per_s:,.0f}"),
    ):
        table.add_row(name, str(value))
    console.print(table)
    console.print(f"data in {summary.data_dir} — try `grebe dlq list` or `grebe annotations "
                  f"sample-0000` with GREBE_DATA_DIR={summary.data_dir}")
    return summary


def print_demo(summary: DemoSummary, console: Console) -> None:
    # Flow names are long (post_embedding_with_summary_for_reply): keep them whole and the
    # numbers compact so the table reads in an 80-column terminal; labels go below it.
    table = Table(title="grebe demo: flows", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("flow", no_wrap=True)
    for column in ("runs", "skip", "fail", "p50", "p95"):
        table.add_column(column, justify="right", no_wrap=True)
    for name, stats in summary.flows.items():
        table.add_row(
            name, str(stats.runs), str(stats.statuses.get("skipped", 0)),
            str(stats.statuses.get("failed", 0)),
            f"{stats.percentile(50) * 1000:.0f}ms", f"{stats.percentile(95) * 1000:.0f}ms",
        )
    console.print(table)
    for name, stats in summary.flows.items():
        if stats.labels:
            top = ", ".join(f"{k} {v}" for k, v in stats.labels.most_common(4))
            console.print(f"  [bold]{name}[/]: {top}", overflow="fold")
    console.print(
        f"{summary.messages} messages, {summary.posts} posts in {summary.processing_s:.1f} s "
        f"([bold]{summary.posts_per_s:.1f} posts/s[/]) after {summary.startup_s:.1f} s of model "
        f"loading; {summary.annotations} annotations, {summary.dead_lettered} dead-lettered."
    )
    console.print(summary.spam_agreement())
    console.print(f"report: {summary.report}")
    console.print(f"query: GREBE_DATA_DIR={summary.data_dir} grebe annotations photo-00")


def analyze_command(config: GrebeConfig, text: str, *, images: list[str], videos: list[str],
                    reply_to: str | None, as_json: bool, console: Console) -> None:
    from grebe.commands.analyze import analyze

    logging.getLogger("grebe").setLevel(logging.ERROR)
    with console.status("loading models and analysing..."):
        results = asyncio.run(analyze(config, text, images=images, videos=videos,
                                      reply_to=reply_to))
    if as_json:
        console.print_json(msgspec.json.encode([_as_dict(r) for r in results]).decode())
        return
    print_results(results, console)


def _as_dict(result: PlanResult) -> dict[str, object]:
    out = result.output
    return {
        "plan": result.plan, "version": result.version, "status": result.status.value,
        "labels": out.labels, "scores": out.scores, "reasons": out.reasons,
        "embedding_dims": len(out.embedding) if out.embedding else 0,
        "transcript": out.transcript, "model_versions": out.model_versions,
        "error": result.error, "skipped_because": result.skip_reasons.get(
            next(iter(result.skip_reasons), ""), None),
    }


def print_results(results: list[PlanResult], console: Console) -> None:
    table = Table(title="grebe analyze", show_lines=True)
    for column in ("flow", "status", "labels", "scores", "reasons"):
        table.add_column(column, overflow="fold")
    for result in results:
        out = result.output
        status = result.status.value
        if result.skip_reasons:
            first = next(iter(result.skip_reasons))
            status += f"\n({result.skip_reasons[first]})"
        if result.error:
            status += f"\n{result.error}"
        scores = "\n".join(f"{k} {v:.3f}" for k, v in list(out.scores.items())[:SCORE_LIMIT])
        reasons = "\n".join(f"{k}: {v[:160]}" for k, v in out.reasons.items())
        if out.embedding:
            reasons += f"\nembedding: {len(out.embedding)} dims"
        if out.transcript:
            reasons += f"\ntranscript: {out.transcript[:200]}"
        table.add_row(result.plan, status, "\n".join(out.labels), scores, reasons)
    console.print(table)


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def eval_command(path: Path, label_field: str, *, config: GrebeConfig | None,
                 plans: list[str], as_json: bool, console: Console) -> None:
    from grebe.commands.evaluate import evaluate

    logging.getLogger("grebe").setLevel(logging.ERROR)
    with console.status("loading models and running the flows..."):
        report = asyncio.run(evaluate(path, label_field, base=config, plans=plans))
    if as_json:
        console.print_json(msgspec.json.encode(report.as_dict()).decode())
        return
    table = Table(title=f"grebe eval: {report.examples} posts", box=box.SIMPLE_HEAD)
    for column in ("plan", "label", "precision", "recall", "F1", "FPR", "tp", "fp", "fn", "tn"):
        text = column in ("plan", "label")
        table.add_column(column, justify="left" if text else "right", no_wrap=text)
    for s in report.labels:
        table.add_row(s.plan, s.label, _rate(s.precision), _rate(s.recall), _rate(s.f1),
                      _rate(s.fpr), str(s.tp), str(s.fp), str(s.fn), str(s.tn))
    console.print(table)
    for plan, pairs in report.confusion.items():
        expected = sorted({e for e, _ in pairs})
        predicted = sorted({p for _, p in pairs})
        matrix = Table(title=f"{plan}: expected (rows) × predicted (columns)",
                       box=box.SIMPLE_HEAD)
        matrix.add_column("expected")
        for p in predicted:
            matrix.add_column(p, justify="right")
        for e in expected:
            matrix.add_row(e, *(str(pairs.get((e, p), 0)) for p in predicted))
        console.print(matrix)
    if report.missing or report.dead_lettered:
        console.print(f"[yellow]no annotation:[/] {report.missing or 'none'}; "
                      f"dead-lettered: {report.dead_lettered}")
