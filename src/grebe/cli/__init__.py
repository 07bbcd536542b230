"""The `grebe` command line (typer + rich). Each command is a thin shell over a package
function; nothing here holds logic another module needs.

One module per command group: `pipeline` (run, serve), `streams` (ingest, annotations,
dlq, topics), `tooling` (demo, analyze, eval), `media`, `thunder`, `feed`, `keys`
(api-key); `common` holds what they share. Commands are registered here, in one list,
so `grebe --help` lists them in this order.
"""

from __future__ import annotations

from typing import Annotated

import typer

import grebe
import grebe.blas  # first: one BLAS thread before NumPy loads (grebe.blas)
from grebe.cli import feed, keys, media, pipeline, streams, thunder, tooling
from grebe.cli.common import console

app = typer.Typer(
    no_args_is_help=True, add_completion=False,
    help="grebe: content understanding of social posts at stream scale, and a feed served "
    "from what it learns. Start with `grebe demo`.",
)

for _name, _command in (
    ("run", pipeline.run),
    ("ingest", streams.ingest),
    ("annotations", streams.annotations_command),
    ("demo", tooling.demo),
    ("analyze", tooling.analyze),
    ("eval", tooling.eval_cmd),
    ("feed", feed.feed_command),
    ("feed-serve", feed.feed_serve),
    ("serve", pipeline.api_serve),
):
    app.command(_name)(_command)

for _name, _group in (
    ("dlq", streams.dlq_app),
    ("topics", streams.topics_app),
    ("media", media.media_app),
    ("thunder", thunder.thunder_app),
    ("api-key", keys.api_key_app),
):
    app.add_typer(_group, name=_name)


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


def main() -> None:
    app()


__all__ = ["app", "main"]
