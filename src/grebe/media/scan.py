"""The batch scan behind `grebe media scan`: local files and URLs through the pipeline,
then one report (items, near-duplicate groups, per-stage stats) as a table or JSON."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.table import Table

from grebe.errors import GrebeError
from grebe.inference.base import OCR, ImageClassifier, Service
from grebe.inference.factory import build_nsfw, build_ocr
from grebe.inference.settings import InferenceConfig
from grebe.media.asr import ASRProcessor
from grebe.media.config import MediaConfig
from grebe.media.pipeline import ItemReport, MediaPipeline

log = logging.getLogger(__name__)
_SNIPPET = 48


class ScanResult(msgspec.Struct, kw_only=True):
    items: list[ItemReport]
    groups: list[list[str]]  # near-duplicate media, by input
    stages: dict[str, dict[str, float | int]]
    models: dict[str, str] = {}
    # Stopped at `max_seconds`: the items not finished by then carry pipeline.STOPPED.
    timed_out: bool = False


def expand_inputs(inputs: Sequence[str]) -> tuple[list[str], list[Path]]:
    """URLs stay as they are; directories expand to the files in them (not recursive).
    Returns the inputs and the directories local files may be read from."""
    out: list[str] = []
    roots: set[Path] = set()
    for raw in inputs:
        if "://" in raw and not raw.startswith("file://"):
            out.append(raw)
            continue
        path = Path(raw.removeprefix("file://")).expanduser().resolve()
        if path.is_dir():
            roots.add(path)
            out.extend(str(p) for p in sorted(path.iterdir()) if p.is_file())
        else:
            roots.add(path.parent)
            out.append(str(path))
    return out, sorted(roots)


def default_models(config: MediaConfig) -> dict[str, Any]:
    """The local NSFW classifier and OCR, built by grebe.inference.factory (the one place
    backends are built) with the default `inference` settings, where installed. Each is
    optional: a missing backend leaves its column empty rather than failing the scan."""
    models: dict[str, Any] = {}
    loaders: list[tuple[str, Callable[[], Any]]] = []
    if config.pipeline.nsfw:
        loaders.append(("nsfw", _load_nsfw))
    if config.pipeline.ocr:
        loaders.append(("ocr", _load_ocr))
    for role, load in loaders:
        try:
            if (model := load()) is not None:
                models[role] = model
        except (ImportError, GrebeError) as exc:
            log.warning("no %s backend: %s", role, exc)
    return models


async def _started(services: dict[str, Any]) -> dict[str, Any]:
    """Start each backend; one that cannot start (binary or weights missing) is left
    out with a warning, so the scan still reports everything else."""
    ready = {}
    for role, service in services.items():
        try:
            if isinstance(service, Service):
                await service.start()
            ready[role] = service
        except GrebeError as exc:
            log.warning("%s backend unavailable, skipped: %s", role, exc)
    return ready


def _load_nsfw() -> ImageClassifier | None:
    return build_nsfw(InferenceConfig())


def _load_ocr() -> OCR | None:
    return build_ocr(InferenceConfig())


async def scan(
    inputs: Sequence[str],
    config: MediaConfig,
    *,
    models: dict[str, Any] | None = None,
    on_done: Callable[[ItemReport], None] | None = None,
    max_seconds: float | None = None,
) -> ScanResult:
    """Scan every input (each its own 'post'), then report duplicates across them.

    With `max_seconds`, the scan stops there and still reports: what finished, the
    stage figures so far, and the rest as stopped (their temporary files removed). A
    caller cancelling the scan instead would get nothing back for minutes of work."""
    urls, roots = expand_inputs(inputs)
    config = config.model_copy(deep=True)
    if roots:
        config.fetch.allow_files = True
        config.fetch.file_roots = [*config.fetch.file_roots, *roots]
    models = await _started(default_models(config) if models is None else models)
    asr = None
    if config.pipeline.asr:
        asr = (await _started({"asr": ASRProcessor(config.asr, config.video)})).get("asr")
    pipeline = MediaPipeline(config, nsfw=models.get("nsfw"), ocr=models.get("ocr"), asr=asr)
    await pipeline.start()
    timed_out = False
    try:
        work = asyncio.ensure_future(pipeline.scan([(url, url) for url in urls], on_done=on_done))
        finished, _ = await asyncio.wait((work,), timeout=max_seconds)
        if not finished:
            timed_out = True
            await pipeline.stop(drain_window_s=0)  # every item left ends as STOPPED
        items = await work
    finally:
        await pipeline.stop()
        if asr is not None:
            await asr.stop()
        for model in models.values():
            if isinstance(model, Service):
                await model.stop()
    return ScanResult(
        items=items,
        groups=pipeline.index.groups(config.dedup.max_distance),
        stages=pipeline.stats(),
        timed_out=timed_out,
        models={
            **{role: getattr(m, "name", type(m).__name__) for role, m in models.items()},
            **({"asr": "faster-whisper:" + (config.asr.model_path.name if config.asr.model_path
                                             else "tiny.en")} if asr is not None else {}),
        },
    )


def _short(text: str, limit: int = _SNIPPET) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _name(url: str) -> str:
    return url.rsplit("/", 1)[-1] or url


def render(result: ScanResult, console: Console) -> None:
    table = Table(title="media", show_lines=False)
    for column in ("item", "kind", "nsfw", "ocr", "transcript", "duplicates", "error"):
        table.add_column(column, overflow="fold")
    for item in result.items:
        nsfw = f"{max(item.nsfw):.3f}" if item.nsfw else "-"
        if item.transcript:
            transcript = _short(item.transcript)
        elif item.transcript_error:
            transcript = f"[dim]{item.transcript_error}[/dim]"
        elif item.kind in ("video", "audio") and item.error is None and "asr" in result.models:
            transcript = "[dim](no speech)[/dim]"
        else:
            transcript = ""
        dups = ", ".join(f"{_name(d.url)} ({d.distance})" for d in item.duplicates)
        problems = [item.error] if item.error else item.warnings
        error = "[red]" + _short("; ".join(problems), 80) + "[/red]" if problems else ""
        kind = item.kind or "-"
        if item.kind == "video":
            kind += f" {item.duration_s or 0:.1f}s"
        table.add_row(_name(item.url), kind, nsfw, _short(item.ocr_text), transcript, dups,
                      error)
    console.print(table)
    if result.groups:
        groups = Table(title="near-duplicate groups")
        groups.add_column("#")
        groups.add_column("media")
        for n, group in enumerate(result.groups, 1):
            groups.add_row(str(n), ", ".join(_name(u) for u in group))
        console.print(groups)
    stages = Table(title="stages")
    for column in ("stage", "workers", "processed", "errors", "mean ms", "p50 ms", "p99 ms",
                   "max ms"):
        stages.add_column(column, justify="right" if column != "stage" else "left")
    for stage, s in result.stages.items():
        stages.add_row(stage, str(s["workers"]), str(s["processed"]), str(s["errors"]),
                       *(f"{s[k]:.1f}" for k in ("mean_ms", "p50_ms", "p99_ms", "max_ms")))
    console.print(stages)
    if result.models:
        console.print("models: " + ", ".join(f"{k}={v}" for k, v in result.models.items()))
