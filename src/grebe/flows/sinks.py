"""The one sink: how a plan's output becomes an Annotation in the store and on the output
topic: `PostWrites`, which every flow's sink (grebe.flows.shared.sink) hands its
annotation to, so a post's annotations are written together, and `write_annotation`, one
annotation alone (the built-in `basic` plan). Sink rules are declared per plan
(`"sink": sink_with(SinkRules(...))`), not in sink code: whether the annotation goes to
the output topic (for replies too), and which labels are applied to the post's and the
author's records as boolean metadata.

Why records: an annotation is one plan's verdict on one post; a consumer that asks "is
this post / this author flagged?" should not have to read every plan's rows and know
which labels count. A record is OR-merged: a flag, once set by any plan, stays set
(Grox's bool metadata upsert), and every plan adds to it without clearing another's.
Records live in the annotation store as rows of their own producer
(`record.post` under the post id, `record.user` under `user:<author id>`), so every
store backend (memory, SQLite, PostgreSQL) keeps them without a new table.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grebe import codec
from grebe.core.task import TaskContext
from grebe.identity_cache import IdentityCache
from grebe.stores.base import AnnotationStore
from grebe.types import Annotation, Post, post_fingerprint

if TYPE_CHECKING:
    from grebe.flows.services import OutputProducer

POST_RECORD = "record.post"
USER_RECORD = "record.user"
USER_KEY_PREFIX = "user:"  # user records share the store's post-id column
RECORD_VERSION = "1"


@dataclass(frozen=True, slots=True)
class SinkRules:
    """What a plan's sink does besides writing its annotation."""

    publish: bool = True  # send the annotation to the output topic
    publish_replies: bool = True  # False: replies are stored, not published
    post_flags: frozenset[str] = field(default_factory=frozenset)  # applied to the post
    author_flags: frozenset[str] = field(default_factory=frozenset)  # to its author

    def publishes(self, is_reply: bool) -> bool:
        return self.publish and (self.publish_replies or not is_reply)


class FlagRecords:
    """OR-merge of boolean flags into post and user records in the annotation store.
    A lock per record key serialises the read-merge-write of plans of one payload that
    finish together (they run in one engine process)."""

    def __init__(self, store: AnnotationStore) -> None:
        self._store = store
        # Weak: a key's lock lives while some merge holds it, so the map stays small.
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary())

    async def merge(self, producer: str, key: str, flags: set[str], plan: str,
                    fingerprint: str = "", policy_version: str | None = None) -> set[str]:
        """Set `flags` on the record (never clears one); returns the merged flags. The
        record carries the policy version of its latest change."""
        lock = self._locks.get(f"{producer}:{key}")
        if lock is None:
            lock = self._locks[f"{producer}:{key}"] = asyncio.Lock()
        async with lock:
            previous = await self._row(producer, key)  # one read: flags and reasons
            current = set(previous.labels) if previous is not None else set()
            merged = current | flags
            if merged != current:
                reasons = {f: plan for f in flags - current}
                if previous is not None:
                    reasons = {**previous.reasons, **reasons}
                await self._store.upsert([Annotation(
                    post_id=key, producer=producer, version=RECORD_VERSION,
                    labels=sorted(merged), reasons=reasons, content_fingerprint=fingerprint,
                    policy_version=policy_version)])
            return merged

    async def _row(self, producer: str, key: str) -> Annotation | None:
        return next((a for a in await self._store.get(key) if a.producer == producer), None)

    async def flags(self, producer: str, key: str) -> set[str]:
        row = await self._row(producer, key)
        return set(row.labels) if row is not None else set()


#: Fingerprints of the newest posts annotated, by identity (posts are frozen): each of
#: a payload's plans writes one annotation, and a fingerprint hashes the post's JSON
#: (~3 us, six times a post through the default flows).
RECENT_FINGERPRINTS = 1024
_fingerprints: IdentityCache[Post, str] = IdentityCache(RECENT_FINGERPRINTS)


def fingerprint_of(post: Post) -> str:
    """post_fingerprint(post), computed once while the post is among the newest."""
    return _fingerprints.get(post, post_fingerprint)


def annotation_of(ctx: TaskContext, *, producer: str, version: str,
                  policy_version: str | None = None) -> Annotation:
    """The plan's output as the Annotation of this post (its row: post, producer, version)."""
    out, post = ctx.output, ctx.payload.post
    return Annotation(
        post_id=post.id, producer=producer, version=version, labels=list(out.labels),
        scores=dict(out.scores), reasons=dict(out.reasons), embedding=out.embedding,
        transcript=out.transcript, model_versions=dict(out.model_versions),
        content_fingerprint=fingerprint_of(post), policy_version=policy_version,
    )


async def write_annotation(
    ctx: TaskContext, *, store: AnnotationStore, producer: str, version: str,
    publisher: OutputProducer | None, topic: str, rules: SinkRules | None = None,
    records: FlagRecords | None = None, policy_version: str | None = None,
) -> Annotation:
    """Upsert the plan's annotation (idempotent by post, producer, version), apply the
    `rules`' flags to the post/author records, then publish it to `topic`: in this order,
    so a reader of the topic finds the row and the records already written."""
    write = _write_of(ctx, producer=producer, version=version, rules=rules,
                      policy_version=policy_version)
    await store.upsert([write.annotation])
    await _merge_records(write, records)
    if publisher is not None and write.published:
        await publisher.publish(topic, write.key, write.value())
    return write.annotation


@dataclass(slots=True)
class _Write:
    """One plan's annotation and what its sink rules do with it."""

    plan: str
    annotation: Annotation
    rules: SinkRules
    post: Post
    policy_version: str | None
    published: bool
    then: Callable[[], None] | None = None  # once it is written (the plan's dedupe)

    @property
    def key(self) -> bytes:
        return self.post.id.encode()

    def value(self) -> bytes:
        return codec.encode_annotation(self.annotation)


def _write_of(ctx: TaskContext, *, producer: str, version: str, rules: SinkRules | None,
              policy_version: str | None) -> _Write:
    rules = rules or SinkRules()
    post = ctx.payload.post
    annotation = annotation_of(ctx, producer=producer, version=version,
                               policy_version=policy_version)
    codec.require_finite(annotation)  # a NaN is the model's failure, not a null on disk
    return _Write(ctx.plan, annotation, rules, post, policy_version,
                  rules.publishes(post.is_reply))


async def _merge_records(write: _Write, records: FlagRecords | None) -> None:
    if records is None:
        return
    labels, rules, post = set(write.annotation.labels), write.rules, write.post
    producer = write.annotation.producer
    if labels & rules.post_flags:
        await records.merge(POST_RECORD, post.id, labels & rules.post_flags, producer,
                            write.annotation.content_fingerprint, write.policy_version)
    if labels & rules.author_flags:
        await records.merge(USER_RECORD, f"{USER_KEY_PREFIX}{post.author_id}",
                            labels & rules.author_flags, producer,
                            policy_version=write.policy_version)


#: The memo key of a payload's PostWrites, and the task name failures are reported on.
POST_WRITES = "post-writes"
SINK_TASK = "sink"


class PostWrites:
    """A post's annotations, one per plan, written together once all its plans have
    finished (a `grebe.core.memo.Finisher`): one store upsert of them all, then each
    plan's record flags, then one append of those published to the output topic, in the
    order `write_annotation` keeps for one. Six plans' sinks each awaiting their own
    upsert and publish made every plan suspend at its end: an asyncio task, a time limit
    and two futures a plan (docs/benchmarks.md, "One prelude and one write per post").
    The payload's result still waits for these writes, so nothing is acked before it is
    stored; a failed write fails the sink task of the plans whose annotations it held."""

    def __init__(self, store: AnnotationStore, publisher: OutputProducer | None, topic: str,
                 records: FlagRecords | None) -> None:
        self._store, self._publisher, self._topic = store, publisher, topic
        self._records = records
        self._writes: list[_Write] = []

    def add(self, ctx: TaskContext, *, producer: str, version: str, rules: SinkRules | None,
            policy_version: str | None, then: Callable[[], None] | None = None
            ) -> Annotation:
        """Hand over the plan's annotation (checked now: a NaN fails the sink at once);
        `then` runs once it is written."""
        write = _write_of(ctx, producer=producer, version=version, rules=rules,
                          policy_version=policy_version)
        write.then = then
        self._writes.append(write)
        return write.annotation

    def tasks(self) -> dict[str, str]:
        return {write.plan: SINK_TASK for write in self._writes}

    async def finish(self) -> dict[str, tuple[str, BaseException]]:
        writes = self._writes
        try:
            await self._store.upsert([write.annotation for write in writes])
        except Exception as exc:
            return {write.plan: (SINK_TASK, exc) for write in writes}
        failed: dict[str, tuple[str, BaseException]] = {}
        for write in writes:
            try:
                await _merge_records(write, self._records)
            except Exception as exc:
                failed[write.plan] = (SINK_TASK, exc)
        published = [w for w in writes if w.published and w.plan not in failed]
        if self._publisher is not None and published:
            try:
                await _publish_all(self._publisher, self._topic, published)
            except Exception as exc:
                failed.update((write.plan, (SINK_TASK, exc)) for write in published)
        for write in writes:
            if write.then is not None and write.plan not in failed:
                write.then()
        return failed


async def _publish_all(publisher: OutputProducer, topic: str, writes: list[_Write]) -> None:
    """The published annotations of a post in one append."""
    await publisher.publish_many(topic, [(write.key, write.value()) for write in writes])


def sink_with(rules: SinkRules) -> Callable[[TaskContext], Awaitable[Annotation]]:
    """The plan's sink task under `rules` (grebe.flows.shared.sink does the writing)."""
    from grebe.flows import shared

    async def sink(ctx: TaskContext) -> Annotation:
        return await shared.sink(ctx, rules)

    sink.__doc__ = f"shared.sink under {rules}"
    return sink
