"""Validate thunder events and publish them: the one way in for outside producers.

`grebe ingest` checks that each line is a post, so a delete could only go in with
`--no-validate`, unchecked. Here every line must be a tagged thunder event
(`post_create`, `post_delete`, `quoted_delete`; docs/thunder-events.schema.json) with
non-empty ids and finite, non-negative times; a bad line is reported with its number
and skipped, and the good ones are published.

Partition key: a create goes under its conversation id (a reply under the thread's
root when the producer knows it), so a thread's posts share a partition and a parent is
read before its replies; a delete goes under the post id (order against its create does
not matter: a delete of a post not yet seen leaves a tombstone that refuses the create).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import msgspec

from grebe.codec import decode_strict
from grebe.commands.ingest import INGEST_BATCH, IngestReport
from grebe.core.source import Producer
from grebe.errors import DecodeError
from grebe.thunder.events import PostCreate, PostDelete, QuotedPostDelete, ThunderEvent

_strict = msgspec.json.Decoder(ThunderEvent)


def validate_event(raw: bytes) -> ThunderEvent:
    """The event of one line; DecodeError naming what is wrong."""
    event = decode_strict(_strict, raw)
    if not event.post_id:
        raise DecodeError("schema: post_id is empty")
    if isinstance(event, PostCreate):
        if not event.author_id:
            raise DecodeError("schema: author_id is empty")
        when, field = event.created_at, "created_at"
    else:
        when, field = event.deleted_at, "deleted_at"
    if isinstance(event, QuotedPostDelete) and not event.quoted_post_id:
        raise DecodeError("schema: quoted_post_id is empty")
    if not math.isfinite(when) or when < 0:
        raise DecodeError(f"schema: {field} must be finite epoch seconds >= 0, got {when}")
    return event


def event_key(event: ThunderEvent) -> bytes:
    """The partition key (see the module docstring)."""
    if isinstance(event, PostCreate):
        return (event.conversation_id or event.post_id).encode()
    assert isinstance(event, PostDelete | QuotedPostDelete)
    return event.post_id.encode()


async def publish_events(
    lines: Iterable[tuple[int, bytes]], producer: Producer, topic: str,
    on_batch: Callable[[int], None] | None = None,
) -> IngestReport:
    """Publish every valid line (raw JSON, as validated) to `topic`."""
    report = IngestReport()
    batch: list[tuple[bytes | None, bytes]] = []
    seen = 0
    for line_no, line in lines:
        seen += 1
        try:
            event = validate_event(line)
        except DecodeError as exc:
            report.reject(line_no, str(exc))
            continue
        batch.append((event_key(event), line))
        if len(batch) >= INGEST_BATCH:
            await producer.publish_many(topic, batch)
            report.accepted += len(batch)
            batch.clear()
            if on_batch is not None:
                on_batch(seen)
            seen = 0
    if batch:
        await producer.publish_many(topic, batch)
        report.accepted += len(batch)
    if on_batch is not None and seen:
        on_batch(seen)
    return report
