"""POST /v1/posts: check submitted posts with grebe.codec, then append them to the
intake stream's topic in one write, so a request goes in whole or not at all.

A body is one post (an Envelope `{"post": {...}}` or a bare Post) or a JSON array of
them. Every item is decoded exactly as the dispatcher will decode it, so what is
accepted here is never dead-lettered as undecodable later; the bytes appended are the
item's own bytes, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from grebe.brokers.backend import AppendsAtPositions
from grebe.codec import decode_envelope
from grebe.config import GrebeConfig, StreamConfig
from grebe.errors import ConfigError, DecodeError
from grebe.types import Envelope

_items_decoder = msgspec.json.Decoder(list[msgspec.Raw])


class SubmissionError(DecodeError):
    """Submitted posts were refused; `problems` says which item and why."""

    def __init__(self, problems: list[dict[str, Any]]) -> None:
        self.problems = problems
        super().__init__("; ".join(
            f"item {p['index']}: {p['reason']}" if "index" in p else p["reason"]
            for p in problems
        ))


class TooManyPostsError(SubmissionError):
    """More posts in one request than `api.max_batch` allows."""


@dataclass(frozen=True)
class Submitted:
    raw: bytes  # the item exactly as sent: what the stream's message will hold
    envelope: Envelope

    @property
    def key(self) -> bytes:
        return self.envelope.post.id.encode()  # the partition key, as `grebe ingest` uses


def parse_posts(body: bytes, max_batch: int) -> list[Submitted]:
    """The posts of one request body; raises SubmissionError naming every bad item."""
    body = body.strip()
    if body[:1] == b"[":
        try:
            raws = [bytes(item) for item in _items_decoder.decode(body)]
        except msgspec.DecodeError as exc:
            raise SubmissionError([{"reason": f"malformed: {exc}"}]) from exc
        if not raws:
            raise SubmissionError([{"reason": "the array holds no posts"}])
        if len(raws) > max_batch:
            raise TooManyPostsError([{
                "reason": f"{len(raws)} posts in one request; at most {max_batch} (api.max_batch)"
            }])
    elif not body:
        raise SubmissionError([{"reason": "empty body: send a post or a JSON array of posts"}])
    else:
        raws = [body]
    posts, problems = [], []
    for index, raw in enumerate(raws):
        try:
            envelope = decode_envelope(raw)
        except DecodeError as exc:
            problems.append({"index": index, "reason": str(exc)})
            continue
        if not envelope.post.id.strip():
            problems.append({"index": index, "reason": "post.id is empty"})
            continue
        posts.append(Submitted(raw, envelope))
    if problems:
        raise SubmissionError(problems)
    return posts


class Intake(Protocol):
    """Where accepted posts go: the intake stream's topic on its broker."""

    stream: StreamConfig

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def append(self, posts: list[Submitted]) -> list[str | None]:
        """Append durably, in order; the payload id each post will run under, when the
        broker tells where it landed (None where it does not)."""
        ...


def payload_id(stream: str, partition: int, offset: int) -> str:
    """The payload id the dispatcher gives the message at (partition, offset)."""
    return f"{stream}:{partition}:{offset}"


class BrokerIntake:
    """Appends through the producer of the stream's broker (its backend's, as `grebe
    ingest` does). A producer that says where records landed (the local log) gives the
    caller each post's payload id; elsewhere it is None."""

    def __init__(self, stream: StreamConfig, config: GrebeConfig) -> None:
        from grebe.brokers.factory import build_ingest_producer

        self.stream = stream
        self._producer = build_ingest_producer(config, stream.topic)

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def append(self, posts: list[Submitted]) -> list[str | None]:
        records = [(p.key, p.raw) for p in posts]
        if isinstance(self._producer, AppendsAtPositions):
            positions = await self._producer.append_at(self.stream.topic, records)
            return [payload_id(self.stream.name, part, offset) for part, offset in positions]
        await self._producer.publish_many(self.stream.topic, records)
        return [None] * len(posts)


def intake_stream(config: GrebeConfig) -> StreamConfig:
    """The stream `api.stream` names, or the first configured one."""
    if not config.streams:
        raise ConfigError("api: no stream is configured to take submitted posts")
    if config.api.stream is None:
        return config.streams[0]
    for stream in config.streams:
        if stream.name == config.api.stream:
            return stream
    names = ", ".join(s.name for s in config.streams)
    raise ConfigError(f"api.stream {config.api.stream!r} is not a configured stream ({names})")


def build_intake(config: GrebeConfig) -> Intake:
    return BrokerIntake(intake_stream(config), config)
