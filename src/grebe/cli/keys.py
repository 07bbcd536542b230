"""`grebe api-key new`: keys for serve, feed-serve and thunder."""

from __future__ import annotations

from typing import Annotated

import typer

api_key_app = typer.Typer(no_args_is_help=True, help="API keys for serve, feed-serve, thunder.")


@api_key_app.command("new")
def api_key_new(
    key_id: Annotated[str, typer.Argument(help="A name for the key: a-z, 0-9, '-'.")],
    scope: Annotated[
        list[str] | None,
        typer.Option("--scope", help="api, feed, thunder, debug (repeatable; default: "
                     "api, feed, thunder)."),
    ] = None,
) -> None:
    """Make a key: print it once (give it to the caller) and the `auth.keys` entry that
    accepts it (only its sha256 goes into the config)."""
    import yaml
    from pydantic import ValidationError

    from grebe.config import validation_problems
    from grebe.security.keys import DEFAULT_SCOPES, new_key

    try:
        key, entry = new_key(key_id, scope or DEFAULT_SCOPES)  # type: ignore[arg-type]
    except ValidationError as exc:  # not rich: its markup would eat the [a-z] patterns
        typer.echo(f"api-key: {validation_problems(exc)}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"key (shown once): {key}")
    typer.echo("add to the config:")
    entry_yaml = yaml.safe_dump({"auth": {"keys": [entry.model_dump(mode="json")]}},
                                sort_keys=False)
    typer.echo(entry_yaml.rstrip())

