"""`grebe run` and `grebe serve`: the pipeline, alone or with the HTTP API."""

from __future__ import annotations

from typing import Annotated

import typer

from grebe.cli.common import ConfigOption, core_logging, pipeline_config


def run(
    config: ConfigOption = None,
    exit_when_done: Annotated[
        bool, typer.Option(help="Stop once everything in the topics at start is processed.")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run the pipeline until SIGINT/SIGTERM (a second signal forces exit).

    Exit codes: 0 drained, 1 failed, 3 drain window ran out (the rest is redelivered)."""
    from grebe.app.supervisor import run as run_supervisor
    from grebe.commands.startup import log_start

    settings, source = pipeline_config(config)
    core_logging(verbose)
    log_start(settings, source)
    raise typer.Exit(run_supervisor(settings, exit_when_done=exit_when_done))


def api_serve(
    config: ConfigOption = None,
    host: Annotated[str | None, typer.Option(help="Listen address (default api.host).")] = None,
    port: Annotated[
        int | None, typer.Option(min=0, max=65535, help="HTTP port (default api.port).")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run the pipeline and the HTTP API (status page, /v1/posts, /v1/analyze, /metrics)
    in one process until SIGINT/SIGTERM, which stops intake and drains.

    Exit codes: 0 drained, 1 failed, 3 drain window ran out (the rest is redelivered)."""
    from grebe.api.server import run as run_api
    from grebe.commands.startup import log_start

    settings, source = pipeline_config(config)
    chosen = {k: v for k, v in (("host", host), ("port", port)) if v is not None}
    if chosen:
        settings.api = settings.api.model_copy(update=chosen)
    core_logging(verbose)
    log_start(settings, source)
    raise typer.Exit(run_api(settings))

