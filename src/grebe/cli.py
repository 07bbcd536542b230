"""The `grebe` command line (typer + rich). Each command is a thin shell over a package
function; nothing here holds logic another module needs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

import grebe

app = typer.Typer(
    no_args_is_help=True, add_completion=False,
    help="grebe: content understanding of social posts at stream scale, and a feed served "
    "from what it learns. Start with `grebe demo`.",
)
dlq_app = typer.Typer(no_args_is_help=True, help="Inspect and replay dead letters.")
media_app = typer.Typer(no_args_is_help=True, help="Scan media files and URLs.")
topics_app = typer.Typer(
    no_args_is_help=True, help="Kafka topics and RabbitMQ queues: declared vs. existing."
)
app.add_typer(dlq_app, name="dlq")
app.add_typer(topics_app, name="topics")
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


def _core_config(path: Path | None, **overrides: object):  # -> GrebeConfig
    from grebe.config import load_config
    from grebe.errors import ConfigError

    try:
        return load_config(path, **overrides)
    except ConfigError as exc:
        console.print(f"[red]config error:[/red] {exc}")
        raise typer.Exit(2) from exc


def _pipeline_config(path: Path | None):  # -> GrebeConfig
    """`grebe run` and `grebe serve`: with no config file (no -c, no $GREBE_CONFIG) they
    run the packaged defaults (src/grebe/data/default.yaml: the sixteen streams and the
    real flows), not the programmatic no-op default, so ingesting posts and running
    annotates them. The start log says which streams run which plans."""
    import os
    from importlib import resources

    from grebe import constants as C

    if path is None and not os.environ.get(C.CONFIG_ENV_VAR):
        path = Path(str(resources.files("grebe") / C.PACKAGED_DEFAULT_CONFIG))
        console.print(f"no config file: running the defaults of {path}", style="dim")
    return _core_config(path)


def _core_logging(verbose: bool = False, level: int | None = None) -> None:
    import logging

    from rich.logging import RichHandler

    logging.basicConfig(
        level=level or (logging.DEBUG if verbose else logging.INFO),
        format="%(name)s: %(message)s",
        handlers=[RichHandler(console=Console(stderr=True), show_path=False)],
    )
    from grebe.security.scrub import install_log_scrubbing

    install_log_scrubbing()  # no URL credentials or upstream tokens in the log


@app.command()
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

    settings = _pipeline_config(config)
    _core_logging(verbose)
    raise typer.Exit(run_supervisor(settings, exit_when_done=exit_when_done))


@app.command()
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
    from grebe.errors import GrebeError
    from grebe.ingest import IngestInterrupted
    from grebe.ingest import ingest as ingest_lines

    settings = _core_config(config)
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


@app.command("annotations")
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

    settings = _core_config(config)

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
            _core_time(a.updated_at),
        )
    console.print(table)


def _core_broker_call(coro):  # (Coroutine[T]) -> T
    """Run a broker command; a broker or config error is one red line and exit 1, not a
    traceback."""
    import asyncio

    from grebe.errors import GrebeError

    try:
        return asyncio.run(coro)
    except GrebeError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from exc


def _core_time(epoch: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(epoch).isoformat(sep=" ", timespec="seconds")


@dlq_app.command("list")
def dlq_list(
    limit: Annotated[int, typer.Option(min=1, help="Show the newest N.")] = 50,
    config: ConfigOption = None,
) -> None:
    """List dead letters: reason, attempts, last error, source and offset."""
    from rich import box
    from rich.table import Table

    from grebe.dlq import list_dead_letters

    entries = _core_broker_call(list_dead_letters(_core_config(config), limit))
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
            _core_time(d.dead_at)[5:16], (d.last_error or "")[:300],
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
    from grebe.dlq import replay

    report = _core_broker_call(replay(_core_config(config), limit))
    for reason in report.reasons[:20]:
        console.print(f"[yellow]skipped[/yellow] {reason}")
    console.print(f"replayed {report.replayed} dead letters, skipped {report.skipped}")


def _topics_table(config: ConfigOption, title: str) -> bool:
    """Print declared topics beside the brokers'; True when all are as declared."""
    from rich.table import Table

    from grebe.topics import topic_rows

    rows = _core_broker_call(topic_rows(_core_config(config)))
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
    from grebe.topics import create_topics

    created = _core_broker_call(create_topics(_core_config(config)))
    console.print(f"created {len(created)} Kafka topic(s): {', '.join(created) or '-'}")
    if not _topics_table(config, "topics after create"):
        raise typer.Exit(1)


@app.command()
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
    import asyncio
    import logging

    if not basic:
        from grebe.flows.console import demo_command

        _core_logging(level=logging.ERROR)
        demo_command(data_dir, console)
        return

    from rich.table import Table

    from grebe.demo import run_demo

    _core_logging(level=logging.ERROR)  # dead letters are expected here; the table counts them
    with console.status("running the sample through the pipeline..."):
        summary = asyncio.run(run_demo(data_dir))
    table = Table(title="grebe demo")
    table.add_column("")
    table.add_column("", justify="right")
    for name, value in (
        ("sample lines", summary.lines),
        ("rejected at ingest (malformed)", summary.rejected_at_ingest),
        ("ingested", summary.ingested),
        ("annotated", summary.annotated),
        ("skipped (no text)", summary.skipped),
        ("dead-lettered", summary.dead_lettered),
        ("engine start-up", f"{summary.startup_s:.2f} s"),
        ("processing", f"{summary.processing_s:.2f} s"),
        ("posts/s", f"{summary.posts_per_s:,.0f}"),
    ):
        table.add_row(name, str(value))
    console.print(table)
    console.print(f"data in {summary.data_dir} — try `grebe dlq list` or `grebe annotations "
                  f"sample-0000` with GREBE_DATA_DIR={summary.data_dir}")


# --- media commands ---


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
) -> None:
    """Fetch/decode, classify, transcribe and near-duplicate-check media; print a report.

    Exit code 1 when any item could not be processed (see its error)."""
    import asyncio

    import msgspec
    from rich.progress import Progress

    from grebe.errors import ConfigError
    from grebe.media.config import MediaConfig
    from grebe.media.scan import render, scan

    try:
        media = MediaConfig.from_section(_core_config(config).media)
    except ConfigError as exc:
        console.print(f"[red]config error:[/red] {exc}")
        raise typer.Exit(2) from exc
    media.pipeline.asr, media.pipeline.nsfw, media.pipeline.ocr = asr, nsfw, ocr
    if frames is not None:
        media.video.frames = max(1, frames)
    if distance is not None:
        media.dedup.max_distance = min(64, max(0, distance))
    progress_console = Console(stderr=True)
    with Progress(console=progress_console, transient=True) as progress:
        task = progress.add_task("scanning", total=None)
        result = asyncio.run(scan(inputs, media, on_done=lambda _: progress.advance(task)))
    if as_json:
        typer.echo(msgspec.json.encode(result).decode())
    else:
        render(result, console)
    if any(item.error for item in result.items):
        raise typer.Exit(1)

# --- flows commands (analyze) ---


@app.command()
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
    from grebe.config import load_config
    from grebe.errors import GrebeError
    from grebe.flows.console import analyze_command

    try:
        analyze_command(load_config(config), text, images=image or [], videos=video or [],
                        reply_to=reply_to, as_json=as_json, console=console)
    except GrebeError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc

@app.command("eval")
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
    from grebe.errors import GrebeError
    from grebe.flows.console import eval_command

    try:
        eval_command(data, label, config=_core_config(config) if config else None,
                     plans=plan or [], as_json=as_json, console=console)
    except GrebeError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc

# --- serving commands (thunder, feed, api) ---

thunder_app = typer.Typer(no_args_is_help=True, help="The in-network post store (thunder).")
app.add_typer(thunder_app, name="thunder")


def _serving_config(path: Path | None, section: str, **values: object):  # -> GrebeConfig
    """The config with `values` (those not None) set in its free-form `section`."""
    settings = _core_config(path)
    chosen = {k: v for k, v in values.items() if v is not None}
    if chosen:
        setattr(settings, section, {**getattr(settings, section), **chosen})
    return settings


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

    settings = _serving_config(config, "thunder", port=port, metrics_port=metrics_port)
    _core_logging(verbose)
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
    to the configured output broker. Bad lines are reported and skipped."""
    import asyncio

    from grebe.brokers.factory import build_producer
    from grebe.ingest import read_lines
    from grebe.thunder.publish import publish_events
    from grebe.thunder.settings import thunder_settings

    settings = _core_config(config)
    target = topic or thunder_settings(settings.thunder).topic
    producer = build_producer(settings)
    if producer is None:
        console.print("[red]output.broker is none: nowhere to publish[/red]")
        raise typer.Exit(2)

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


def _split_ids(values: list[str] | None) -> list[str]:
    return [v.strip() for value in values or [] for v in value.split(",") if v.strip()]


@app.command("feed")
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

    settings = _core_config(config)

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


@app.command("feed-serve")
def feed_serve(
    config: ConfigOption = None,
    viewers: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="JSON/YAML viewers file.")
    ] = None,
    port: Annotated[int | None, typer.Option(help="HTTP port (default feed.http_port).")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Serve GET /home/{user_id} (JSON) until SIGINT/SIGTERM."""
    import asyncio

    from grebe.errors import GrebeError
    from grebe.feed.runner import serve_http

    settings = _serving_config(config, "feed", http_port=port)
    _core_logging(verbose)
    try:
        asyncio.run(serve_http(settings, viewers))
    except GrebeError as exc:
        console.print(f"[red]feed:[/red] {exc}")
        raise typer.Exit(2) from exc


# --- api commands ---


@app.command("serve")
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

    settings = _pipeline_config(config)
    chosen = {k: v for k, v in (("host", host), ("port", port)) if v is not None}
    if chosen:
        settings.api = settings.api.model_copy(update=chosen)
    _core_logging(verbose)
    raise typer.Exit(run_api(settings))


# --- security commands ---

api_key_app = typer.Typer(no_args_is_help=True, help="API keys for serve, feed-serve, thunder.")
app.add_typer(api_key_app, name="api-key")


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


def main() -> None:
    app()
