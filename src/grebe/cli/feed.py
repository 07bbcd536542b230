"""`grebe feed` and `feed-serve`: the home timeline, printed or served."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grebe.cli.common import ConfigOption, console, core_config, core_logging, serving_config


def _split_ids(values: list[str] | None) -> list[str]:
    return [v.strip() for value in values or [] for v in value.split(",") if v.strip()]


def feed_command(
    user_id: Annotated[str, typer.Argument(help="The viewer.")],
    config: ConfigOption = None,
    viewers: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, help="JSON/YAML file of viewers (follows, "
                     "mutes, engaged posts, interests, safety level)."),
    ] = None,
    following: Annotated[
        list[str] | None, typer.Option(help="Followed user ids (repeat or comma-separate).")
    ] = None,
    interest: Annotated[
        list[str] | None, typer.Option(help="A stated interest, as text (repeatable).")
    ] = None,
    max_results: Annotated[int | None, typer.Option(min=1, max=1000)] = None,
    safety_level: Annotated[str | None, typer.Option(help="e.g. strict, default, off.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print USER_ID's home timeline, ranked from the posts stream and the annotations."""
    import asyncio
    import json

    from rich.table import Table

    from grebe.errors import GrebeError
    from grebe.feed.http import result_json
    from grebe.feed.runner import feed_from_config

    settings = core_config(config)

    async def go():  # -> HomeResult
        async with feed_from_config(settings, viewers) as feed:
            return await feed.home(user_id, max_results=max_results, safety_level=safety_level,
                                   following=_split_ids(following), interests=interest or [])

    try:
        result = asyncio.run(go())
    except GrebeError as exc:
        console.print(f"[red]feed:[/red] {exc}")
        raise typer.Exit(2) from exc
    if as_json:
        console.print_json(json.dumps(result_json(result, debug=True)))
        return
    table = Table(title=f"home timeline of {user_id}")
    for column in ("#", "post", "author", "network", "score", "labels"):
        table.add_column(column)
    for rank, c in enumerate(result.selected, 1):
        table.add_row(str(rank), c.post_id, c.author_id, "in" if c.in_network else "out",
                      f"{c.score:.3f}", ", ".join(c.labels))
    console.print(table)
    console.print(f"retrieved {len(result.retrieved)}, filtered {result.filtered_by() or 0}, "
                  f"{result.elapsed_s * 1000:.1f} ms")
    for name, error in result.errors.items():
        console.print(f"[yellow]skipped {name}:[/yellow] {error}")


def feed_serve(
    config: ConfigOption = None,
    viewers: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="JSON/YAML viewers file.")
    ] = None,
    port: Annotated[int | None, typer.Option(help="HTTP port (default feed.http_port).")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Serve GET /home/{user_id} (JSON) until SIGINT/SIGTERM."""
    from functools import partial

    from grebe.errors import GrebeError
    from grebe.feed.runner import serve

    settings = serving_config(config, "feed", http_port=port)
    core_logging(verbose)
    try:
        serve(settings, viewers, setup=partial(core_logging, verbose))
    except GrebeError as exc:
        console.print(f"[red]feed:[/red] {exc}")
        raise typer.Exit(2) from exc

