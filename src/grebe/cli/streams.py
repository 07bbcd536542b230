"""`grebe ingest`, `annotations`, `dlq` and `topics`: what is on the streams and in the
store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grebe.cli.common import ConfigOption, broker_call, console, core_config, format_time

dlq_app = typer.Typer(no_args_is_help=True, help="Inspect and replay dead letters.")
topics_app = typer.Typer(
    no_args_is_help=True, help="Kafka topics and RabbitMQ queues: declared vs. existing."
)


def ingest(
    file: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="JSONL, one post a line.")
    ],
    topic: Annotated[str | None, typer.Option(help="Topic (default: the first stream's).")] = None,
    validate: Annotated[
        bool, typer.Option(help="Check each line is a post; --no-validate checks JSON only.")
    ] = True,
    strict: Annotated[
        bool, typer.Option(help="Append nothing if any line is bad.")
    ] = False,
    start_line: Annotated[
        int, typer.Option(min=1, help="Skip the lines before this one (resume an interrupted run).")
    ] = 1,
    config: ConfigOption = None,
) -> None:
    """Append posts from a JSONL file to a topic, on the broker of the stream that reads
    it (local log by default). The whole file is checked first: bad lines are reported
    and skipped (or, with --strict, nothing is appended)."""
    import asyncio

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from grebe.brokers.factory import build_ingest_producer
    from grebe.commands.ingest import IngestInterrupted
    from grebe.commands.ingest import ingest as ingest_lines
    from grebe.errors import GrebeError

    settings = core_config(config)
    target = topic or (settings.streams[0].topic if settings.streams else None)
    if not target:
        console.print("[red]no --topic given and no stream configured[/red]")
        raise typer.Exit(2)
    with file.open("rb") as handle:
        total = sum(1 for n, line in enumerate(handle, 1) if line.strip() and n >= start_line)

    async def go():  # -> IngestReport
        producer = build_ingest_producer(settings, target)
        await producer.start()
        try:
            with Progress(
                TextColumn(f"ingest → {target}"), BarColumn(), MofNCompleteColumn(),
                console=console,
            ) as progress:
                task = progress.add_task("lines", total=total)
                return await ingest_lines(
                    file, producer, target, validate=validate, strict=strict,
                    start_line=start_line, on_batch=lambda n: progress.advance(task, n),
                )
        finally:
            await producer.stop()

    interrupted: str | None = None
    try:
        report = asyncio.run(go())
    except IngestInterrupted as exc:
        report, interrupted = exc.report, str(exc)
    except GrebeError as exc:  # the broker refused before anything was appended
        console.print(f"[red]ingest failed, nothing appended:[/red] {exc}")
        raise typer.Exit(1) from None
    for line_no, reason in report.errors[:20]:
        console.print(f"[yellow]line {line_no}:[/yellow] {reason}")
    if report.rejected > 20:
        console.print(f"... and {report.rejected - 20} more bad lines")
    if strict and report.rejected:
        console.print(
            f"[red]appended nothing to {target!r}:[/red] {report.rejected} bad lines (--strict)"
        )
        raise typer.Exit(1)
    console.print(
        f"ingested [bold]{report.accepted}[/bold] posts into {target!r}, "
        f"rejected {report.rejected} bad lines"
    )
    if interrupted:
        console.print(f"[red]interrupted:[/red] {interrupted}")
        raise typer.Exit(1)


def annotations_command(
    post_id: Annotated[str, typer.Argument(help="The post id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    config: ConfigOption = None,
) -> None:
    """Show every annotation of one post."""
    import asyncio

    from rich.table import Table

    from grebe.codec import encode
    from grebe.stores.factory import build_store

    settings = core_config(config)

    async def go():  # -> list[Annotation]
        store = build_store(settings)
        await store.start()
        try:
            return await store.get(post_id)
        finally:
            await store.stop()

    rows = asyncio.run(go())
    if as_json:
        console.print_json(encode(rows).decode())
        return
    if not rows:
        console.print(f"no annotations for post {post_id!r}")
        raise typer.Exit(1)
    table = Table(title=f"annotations of {post_id}")
    for column in ("producer", "version", "labels", "scores", "reasons", "updated"):
        table.add_column(column)
    for a in rows:
        table.add_row(
            a.producer, a.version, ", ".join(a.labels),
            "\n".join(f"{k}={v:g}" for k, v in sorted(a.scores.items())),
            "\n".join(f"{k}: {v}" for k, v in sorted(a.reasons.items())),
            format_time(a.updated_at),
        )
    console.print(table)


@dlq_app.command("list")
def dlq_list(
    limit: Annotated[int, typer.Option(min=1, help="Show the newest N.")] = 50,
    config: ConfigOption = None,
) -> None:
    """List dead letters: reason, attempts, last error, source and offset."""
    from rich import box
    from rich.table import Table

    from grebe.commands.dlq import list_dead_letters

    entries = broker_call(list_dead_letters(core_config(config), limit))
    if not entries:
        console.print("no dead letters")
        return
    table = Table(title="dead letters (* = replayed)", box=box.SIMPLE, pad_edge=False)
    for column in ("#", "stream@partition:offset", "reason", "tries", "dead at"):
        table.add_column(column, no_wrap=True)
    table.add_column("last error", overflow="fold")
    for entry in entries:
        d = entry.record
        number = f"{entry.broker}:{entry.partition}:{entry.offset}{'*' if entry.replayed else ''}"
        if d is None:
            table.add_row(number, "?", "unreadable", "", "", entry.error or "")
            continue
        table.add_row(
            number, f"{d.source}@{d.partition}:{d.offset}", d.reason, str(d.attempts),
            format_time(d.dead_at)[5:16], (d.last_error or "")[:300],
        )
    console.print(table)


@dlq_app.command("replay")
def dlq_replay(
    limit: Annotated[
        int | None, typer.Option(min=1, help="Replay at most N per broker (default: all).")
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Send dead letters not replayed yet back to their streams (each one once, even
    with another replay running)."""
    from grebe.commands.dlq import replay

    report = broker_call(replay(core_config(config), limit))
    for reason in report.reasons[:20]:
        console.print(f"[yellow]skipped[/yellow] {reason}")
    console.print(f"replayed {report.replayed} dead letters, skipped {report.skipped}")


def _topics_table(config: ConfigOption, title: str) -> bool:
    """Print declared topics beside the brokers'; True when all are as declared."""
    from rich.table import Table

    from grebe.commands.topics import topic_rows

    rows = broker_call(topic_rows(core_config(config)))
    if not rows:
        console.print("no Kafka or RabbitMQ streams configured: nothing to declare")
        return True
    table = Table(title=title)
    for column in ("broker", "name", "role", "config wants", "broker has", "differences"):
        table.add_column(column)
    for r in rows:
        table.add_row(r.broker, r.name, r.role, r.wanted, r.found,
                      "; ".join(r.differences) or "[green]ok[/green]")
    console.print(table)
    return not any(r.differences for r in rows)


@topics_app.command("list")
def topics_list(config: ConfigOption = None) -> None:
    """Show each topic/queue the config declares and what the broker has."""
    _topics_table(config, "topics")


@topics_app.command("check")
def topics_check(config: ConfigOption = None) -> None:
    """Like list; exit 1 if anything is missing or differs from the config."""
    if not _topics_table(config, "topics"):
        raise typer.Exit(1)


@topics_app.command("create")
def topics_create(config: ConfigOption = None) -> None:
    """Create missing Kafka topics (inputs too) and declare RabbitMQ queues."""
    from grebe.commands.topics import create_topics

    created = broker_call(create_topics(core_config(config)))
    console.print(f"created {len(created)} Kafka topic(s): {', '.join(created) or '-'}")
    if not _topics_table(config, "topics after create"):
        raise typer.Exit(1)

