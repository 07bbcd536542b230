"""`grebe media scan`: fetch, decode, classify and transcribe media files and URLs."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from grebe.cli.common import ConfigOption, console, core_config

media_app = typer.Typer(no_args_is_help=True, help="Scan media files and URLs.")


@media_app.command("scan")
def media_scan(
    inputs: Annotated[list[str], typer.Argument(help="Files, directories or http(s) URLs.")],
    config: ConfigOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    frames: Annotated[int | None, typer.Option(help="Frames sampled per video.")] = None,
    asr: Annotated[bool, typer.Option(help="Transcribe audio (Whisper).")] = True,
    nsfw: Annotated[bool, typer.Option(help="Score images and frames for NSFW.")] = True,
    ocr: Annotated[bool, typer.Option(help="Read text in images (tesseract).")] = True,
    distance: Annotated[
        int | None, typer.Option(help="Near-duplicate Hamming distance (of 64 bits).")
    ] = None,
    max_seconds: Annotated[
        float | None,
        typer.Option(min=0.001, help="Stop after this long and report what finished."),
    ] = None,
) -> None:
    """Fetch/decode, classify, transcribe and near-duplicate-check media; print a report.

    Exit code 1 when any item could not be processed (see its error), items cut off
    by --max-seconds included."""
    import asyncio

    import msgspec
    from rich.progress import Progress

    from grebe.media.scan import render, scan

    media = core_config(config).media
    media.pipeline.asr, media.pipeline.nsfw, media.pipeline.ocr = asr, nsfw, ocr
    if frames is not None:
        media.video.frames = max(1, frames)
    if distance is not None:
        media.dedup.max_distance = min(64, max(0, distance))
    progress_console = Console(stderr=True)
    with Progress(console=progress_console, transient=True) as progress:
        task = progress.add_task("scanning", total=None)
        result = asyncio.run(scan(inputs, media, on_done=lambda _: progress.advance(task),
                                  max_seconds=max_seconds))
    if as_json:
        typer.echo(msgspec.json.encode(result).decode())
    else:
        render(result, console)
    if any(item.error for item in result.items):
        raise typer.Exit(1)
