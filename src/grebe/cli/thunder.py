"""`grebe thunder serve` and `publish`: the in-network post store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grebe.cli.common import ConfigOption, console, core_config, core_logging, serving_config

thunder_app = typer.Typer(no_args_is_help=True, help="The in-network post store (thunder).")


@thunder_app.command("serve")
def thunder_serve(
    config: ConfigOption = None,
    port: Annotated[int | None, typer.Option(help="gRPC port (default thunder.port).")] = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="Serve Prometheus metrics on this port.")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Load the posts stream into memory and serve GetInNetworkPosts over gRPC until
    SIGINT/SIGTERM. Health is NOT_SERVING until the stream is caught up."""
    import asyncio

    from grebe.errors import GrebeError
    from grebe.thunder.runner import serve

    settings = serving_config(config, "thunder", port=port, metrics_port=metrics_port)
    core_logging(verbose)
    try:
        asyncio.run(serve(settings))
    except GrebeError as exc:
        console.print(f"[red]thunder:[/red] {exc}")
        raise typer.Exit(2) from exc


@thunder_app.command("publish")
def thunder_publish(
    file: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="JSONL, one thunder event a line.")
    ],
    topic: Annotated[str | None, typer.Option(help="Topic (default thunder.topic).")] = None,
    config: ConfigOption = None,
) -> None:
    """Validate thunder events (post_create, post_delete, quoted_delete) and publish them
    to the topic on the broker of the stream that reads it (where thunder reads it too).
    Bad lines are reported and skipped."""
    import asyncio

    from grebe.brokers.factory import build_ingest_producer
    from grebe.commands.ingest import read_lines
    from grebe.commands.thunder_publish import publish_events

    settings = core_config(config)
    target = topic or settings.thunder.topic
    producer = build_ingest_producer(settings, target)  # where thunder's reader reads it

    async def go():  # -> IngestReport
        await producer.start()
        try:
            return await publish_events(read_lines(file), producer, target)
        finally:
            await producer.stop()

    report = asyncio.run(go())
    for line_no, reason in report.errors[:20]:
        console.print(f"[yellow]line {line_no}:[/yellow] {reason}")
    console.print(
        f"published [bold]{report.accepted}[/bold] events to {target!r}, "
        f"rejected {report.rejected} bad lines"
    )
    if report.rejected:
        raise typer.Exit(1)

