"""What every command shares: the console, the --config option, loading the config
(a config error is one red line and exit 2), logging, broker calls."""

from __future__ import annotations

from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console

if TYPE_CHECKING:  # not imported at start: `grebe --help` stays quick
    from grebe.commands.startup import ConfigFile
    from grebe.config import GrebeConfig

T = TypeVar("T")

console = Console()

ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", help="YAML config file (or $GREBE_CONFIG).")
]


def core_config(path: Path | None, **overrides: object) -> GrebeConfig:
    from grebe.config import load_config
    from grebe.errors import ConfigError

    try:
        return load_config(path, **overrides)
    except ConfigError as exc:
        console.print(f"[red]config error:[/red] {exc}")
        raise typer.Exit(2) from exc


def pipeline_config(path: Path | None) -> tuple[GrebeConfig, ConfigFile]:
    """`grebe run` and `grebe serve`: with no config file (no -c, no $GREBE_CONFIG) they
    run the packaged defaults (src/grebe/data/default.yaml: the sixteen streams and the
    real flows), not the programmatic no-op default, so ingesting posts and running
    annotates them. The start log says which streams run which plans
    (grebe.commands.startup)."""
    from grebe.commands.startup import pipeline_config_file

    source = pipeline_config_file(path)
    if source.packaged:
        console.print(f"no config file: running the defaults of {source.path}", style="dim")
    return core_config(source.path), source


def core_logging(verbose: bool = False, level: int | None = None) -> None:
    import logging

    from rich.logging import RichHandler

    logging.basicConfig(
        level=level or (logging.DEBUG if verbose else logging.INFO),
        format="%(name)s: %(message)s",
        handlers=[RichHandler(console=Console(stderr=True), show_path=False)],
    )
    from grebe.security.scrub import install_log_scrubbing

    install_log_scrubbing()  # no URL credentials or upstream tokens in the log


def broker_call(coro: Coroutine[Any, Any, T]) -> T:
    """Run a broker command; a broker or config error is one red line and exit 1, not a
    traceback."""
    import asyncio

    from grebe.errors import GrebeError

    try:
        return asyncio.run(coro)
    except GrebeError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from exc


def format_time(epoch: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(epoch).isoformat(sep=" ", timespec="seconds")


def serving_config(path: Path | None, section: str, **values: object) -> GrebeConfig:
    """The config with `values` (those not None) set in its `section`, validated like
    the file's own values (a bad --port is a config error naming `<section>.port`)."""
    from pydantic import ValidationError

    from grebe.settings_base import validation_problems

    settings = core_config(path)
    chosen = {k: v for k, v in values.items() if v is not None}
    if chosen:
        current = getattr(settings, section)
        try:
            setattr(settings, section, type(current).model_validate(
                {**current.model_dump(), **chosen}))
        except ValidationError as exc:
            console.print(f"[red]config error:[/red] {validation_problems(exc, section + '.')}")
            raise typer.Exit(2) from exc
    return settings

