"""Load a JSONL file of posts into a topic (`grebe ingest`, the demo, the benchmarks).

Each line is one message: an Envelope `{"post": {...}}` or a bare Post. A bad line is
reported with its line number and skipped; the rest still go in. With `validate=False`
only JSON syntax is checked, so posts the pipeline will reject (and dead-letter) can be
sent on purpose. Lines are published in batches keyed by post id (the partition key).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from grebe.codec import decode_envelope
from grebe.core.source import Producer
from grebe.errors import DecodeError

INGEST_BATCH = 1000
MAX_REPORTED_ERRORS = 1000  # beyond this only the count grows


@dataclass
class IngestReport:
    accepted: int = 0
    rejected: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason)

    def reject(self, line_no: int, reason: str) -> None:
        self.rejected += 1
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append((line_no, reason))


def message_key(line: bytes, validate: bool) -> bytes | None:
    """The post id of one line as the partition key; raises DecodeError if bad."""
    if validate:
        return decode_envelope(line).post.id.encode()
    try:
        message = msgspec.json.decode(line)
    except msgspec.DecodeError as exc:
        raise DecodeError(f"malformed: {exc}") from exc
    post = message.get("post", message) if isinstance(message, dict) else None
    post_id = post.get("id") if isinstance(post, dict) else None
    return post_id.encode() if isinstance(post_id, str) else None


def read_lines(path: Path) -> Iterable[tuple[int, bytes]]:
    with Path(path).open("rb") as handle:
        for line_no, line in enumerate(handle, start=1):
            stripped = line.strip()
            if stripped:
                yield line_no, stripped


async def ingest(
    lines: Iterable[tuple[int, bytes]], producer: Producer, topic: str, *,
    validate: bool = True, on_batch: Callable[[int], None] | None = None,
) -> IngestReport:
    """Publish every good line to `topic`; `on_batch(n)` after each batch of n lines."""
    report = IngestReport()
    batch: list[tuple[bytes | None, bytes]] = []
    seen = 0

    async def flush() -> None:
        nonlocal seen
        if batch:
            await producer.publish_many(topic, batch)
            report.accepted += len(batch)
            batch.clear()
        if on_batch is not None:
            on_batch(seen)
        seen = 0

    for line_no, line in lines:
        seen += 1
        try:
            key = message_key(line, validate)
        except DecodeError as exc:
            report.reject(line_no, str(exc))
        else:
            batch.append((key, line))
        if seen >= INGEST_BATCH:
            await flush()
    await flush()
    return report
