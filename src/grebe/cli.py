"""The `grebe` command line (typer + rich). Each command is a thin shell over a package
function; nothing here holds logic another module needs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

import grebe

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
dlq_app = typer.Typer(no_args_is_help=True, help="Inspect and replay dead letters.")
media_app = typer.Typer(no_args_is_help=True, help="Scan media files and URLs.")
app.add_typer(dlq_app, name="dlq")
app.add_typer(media_app, name="media")
console = Console()

ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", help="YAML config file (or $GREBE_CONFIG).")
]


def _version(value: bool) -> None:
    if value:
        console.print(f"grebe {grebe.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print version.")
    ] = False,
) -> None:
    """grebe: content understanding of social posts at stream scale."""


# --- core runtime commands (run, ingest, annotations, dlq, demo) ---

# --- media commands ---

# --- flows commands (analyze) ---

# --- serving commands (thunder, feed, api) ---


def main() -> None:
    app()
