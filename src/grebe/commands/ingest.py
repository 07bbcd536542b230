"""Load a JSONL file of posts into a topic (`grebe ingest`, the demo, the benchmarks).

Each line is one message: an Envelope `{"post": {...}}` or a bare Post. The whole input is
checked before anything is appended, so a bad line never leaves half a file behind: every
bad line is reported with its line number and reason, and either skipped (the default) or,
with `strict`, nothing is appended at all. With `validate=False` only JSON syntax and size
are checked, so posts the pipeline will reject (and dead-letter) can be sent on purpose.
Lines are published in batches keyed by post id (the partition key). If publishing stops
part way (the broker failed), the report says the last line appended, so a re-run with
`start_line` appends the rest once instead of the whole file twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from grebe import constants as C
from grebe.codec import decode_envelope
from grebe.core.source import Producer
from grebe.errors import DecodeError, GrebeError

INGEST_BATCH = 1000
MAX_REPORTED_ERRORS = 1000  # beyond this only the count grows

Lines = Sequence[tuple[int, bytes]] | Path


@dataclass
class IngestReport:
    accepted: int = 0  # lines appended to the topic
    rejected: int = 0  # bad lines, not appended
    errors: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason)
    last_line_appended: int = 0  # the highest line number now in the topic
    interrupted: str | None = None  # why publishing stopped before the end, if it did

    def reject(self, line_no: int, reason: str) -> None:
        self.rejected += 1
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append((line_no, reason))


class IngestInterrupted(GrebeError):
    """Publishing failed part way; `report` says what went in and where to resume."""

    def __init__(self, report: IngestReport) -> None:
        super().__init__(
            f"appended {report.accepted} lines (through line {report.last_line_appended}) "
            f"before the broker failed: {report.interrupted}; re-run with start line "
            f"{report.last_line_appended + 1} to append the rest"
        )
        self.report = report


def message_key(line: bytes, validate: bool) -> bytes | None:
    """The post id of one line as the partition key; raises DecodeError if bad."""
    if validate:
        return decode_envelope(line).post.id.encode()
    if len(line) > C.MAX_MESSAGE_BYTES:
        raise DecodeError(f"too large: {len(line)} bytes > limit {C.MAX_MESSAGE_BYTES}")
    try:
        message = msgspec.json.decode(line)
    except msgspec.DecodeError as exc:
        raise DecodeError(f"malformed: {exc}") from exc
    except (UnicodeError, ValueError, RecursionError) as exc:
        raise DecodeError(f"malformed: {type(exc).__name__}: {exc}") from exc
    post = message.get("post", message) if isinstance(message, dict) else None
    post_id = post.get("id") if isinstance(post, dict) else None
    return post_id.encode() if isinstance(post_id, str) else None


def read_lines(path: Path) -> Iterable[tuple[int, bytes]]:
    with Path(path).open("rb") as handle:
        for line_no, line in enumerate(handle, start=1):
            stripped = line.strip()
            if stripped:
                yield line_no, stripped


def _lines(source: Lines, start_line: int) -> Iterable[tuple[int, bytes]]:
    lines = read_lines(source) if isinstance(source, Path) else source
    return ((n, line) for n, line in lines if n >= start_line)


def check(source: Lines, *, validate: bool = True, start_line: int = 1) -> IngestReport:
    """The first pass: every bad line, with its reason; appends nothing."""
    report = IngestReport()
    for line_no, line in _lines(source, start_line):
        try:
            message_key(line, validate)
        except DecodeError as exc:
            report.reject(line_no, str(exc))
    return report


async def ingest(
    source: Lines, producer: Producer, topic: str, *, validate: bool = True,
    strict: bool = False, start_line: int = 1, on_batch: Callable[[int], None] | None = None,
) -> IngestReport:
    """Check every line, then publish the good ones to `topic` (none if `strict` and any
    line is bad); `on_batch(n)` after each batch of n lines. Raises IngestInterrupted if
    the producer fails part way, with the report of what went in."""
    checked = check(source, validate=validate, start_line=start_line)
    report = IngestReport(rejected=checked.rejected, errors=checked.errors)
    if strict and report.rejected:
        return report
    batch: list[tuple[bytes | None, bytes]] = []
    batch_last_line = 0
    seen = 0

    async def flush() -> None:
        nonlocal seen
        if batch:
            try:
                await producer.publish_many(topic, batch)
            except Exception as exc:
                report.interrupted = f"{type(exc).__name__}: {exc}"
                raise IngestInterrupted(report) from exc
            report.accepted += len(batch)
            report.last_line_appended = batch_last_line
            batch.clear()
        if on_batch is not None:
            on_batch(seen)
        seen = 0

    for line_no, line in _lines(source, start_line):
        seen += 1
        try:
            key = message_key(line, validate)
        except DecodeError:
            pass  # reported by the check pass
        else:
            batch.append((key, line))
            batch_last_line = line_no
        if seen >= INGEST_BATCH:
            await flush()
    await flush()
    return report
