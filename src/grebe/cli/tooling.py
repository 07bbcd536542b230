"""`grebe demo`, `analyze` and `eval`: the tooling around the product (grebe.commands)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grebe.cli.common import ConfigOption, console, core_config, core_logging


def demo(
    data_dir: Annotated[
        Path | None, typer.Option(help="Where to put the log and store (default: a temp dir).")
    ] = None,
    basic: Annotated[
        bool, typer.Option("--basic", help="Only the runtime smoke test: the bundled sample "
                           "through the `basic` plan, no models.")
    ] = False,
) -> None:
    """Run every flow with the real local models over a demo set built from packaged
    data (SpamAssassin posts, photos, a video with speech); summary and HTML report."""
    import logging

    from grebe.commands.console import basic_demo_command, demo_command

    if basic:
        core_logging(level=logging.ERROR)  # dead letters are expected; the table counts them
        basic_demo_command(data_dir, console)
        return
    core_logging(level=logging.ERROR)
    demo_command(data_dir, console)


def analyze(
    text: Annotated[str, typer.Argument(help="The post text.")],
    image: Annotated[
        list[str] | None, typer.Option("--image", help="Image path or URL (repeatable).")
    ] = None,
    video: Annotated[
        list[str] | None, typer.Option("--video", help="Video path or URL (repeatable).")
    ] = None,
    reply_to: Annotated[
        str | None, typer.Option("--reply-to", help="Text of the post this one replies to.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    config: ConfigOption = None,
) -> None:
    """Run one post through every flow it is eligible for and print the annotations."""
    from grebe.commands.console import analyze_command
    from grebe.config import load_config
    from grebe.errors import GrebeError

    try:
        analyze_command(load_config(config), text, images=image or [], videos=video or [],
                        reply_to=reply_to, as_json=as_json, console=console)
    except GrebeError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc


def eval_cmd(
    data: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="JSONL: a post and its label(s).")
    ],
    label: Annotated[str, typer.Option("--label", help="The field holding the expected label(s).")],
    plan: Annotated[
        list[str] | None, typer.Option("--plan", "--eligibility", help="Plan to score "
                                       "(repeatable; default: the plans that emit the labels).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    config: ConfigOption = None,
) -> None:
    """Run labelled posts through the real flows (scratch data dir) and print per-label
    precision, recall, F1, FPR and confusion tables."""
    from grebe.commands.console import eval_command
    from grebe.errors import GrebeError

    try:
        eval_command(data, label, config=core_config(config) if config else None,
                     plans=plan or [], as_json=as_json, console=console)
    except GrebeError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
