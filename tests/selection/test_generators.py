"""Grox's sixteen stream generators, one for one in src/grebe/data/default.yaml.

For each generator (the table below is Grox's: grox-core-and-generators.txt and
upstream-inventory.md 1.4), the crafted posts are put on its stream and run through the
real dispatcher and the selection step: exactly the expected posts reach the plans, each
payload carries the generator's eligibilities and mode, and every message is acked done
(none dead-lettered)."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from importlib import resources

import msgspec
import pytest
from tests.core.test_dispatcher import Running, config
from tests.selection.crafted import (
    CRAFTED,
    EVERYTHING,
    LOW_TRACTION,
    NOT_REPLIES_UNPROTECTED,
    REPLIES,
)

from grebe.app.settings import stream_settings
from grebe.brokers.memory import MemorySource
from grebe.config import GrebeConfig, StreamConfig, load_config
from grebe.core.dispatcher import Dispatcher, Stream
from grebe.core.executor import InlineExecutor
from grebe.core.planmaster import PlanMaster
from grebe.core.source import Outcome
from grebe.selection.master import SelectingMaster, selections
from grebe.types import TaskPayload, TaskResult


@dataclass(frozen=True)
class Generator:
    stream: str
    topic: str
    eligibilities: frozenset[str]
    mode: str
    selects: frozenset[str]


def gen(stream: str, topic: str, eligibilities: set[str], mode: str,
        selects: set[str]) -> Generator:
    return Generator(stream, topic, frozenset(eligibilities), mode, frozenset(selects))


BANGER = {"banger_initial_screen"}
PTOS = {"safety_ptos"}
# Grox's generator -> grebe's stream, topic, eligibilities, mode, crafted posts selected.
GROX = {
    "PostStreamTaskGenerator": gen(
        "post_stream", "posts", {"spam_comment", "reply_ranking"}, "realtime",
        REPLIES - {"self_reply"}),
    "MinTractionPostStreamForGroxTaskGenerator": gen(
        "min_traction_for_grox", "posts.min_traction", BANGER, "realtime",
        NOT_REPLIES_UNPROTECTED - LOW_TRACTION),
    "MinTractionPostStreamForGroxPtosTaskGenerator": gen(
        "min_traction_for_grox_ptos", "posts.min_traction.ptos", PTOS, "realtime",
        EVERYTHING - LOW_TRACTION),
    "MinTractionPostStreamForGroxMultiModalTaskGenerator": gen(
        "min_traction_for_grox_multi_modal", "posts.min_traction.multi_modal",
        {"post_embedding_with_summary_for_reply"}, "realtime", REPLIES - LOW_TRACTION),
    "PostEmbeddingV5ForReplyStreamTaskGenerator": gen(
        "post_embedding_v5_for_reply", "posts.min_traction.multi_modal",
        {"mm_emb_v5_for_reply"}, "realtime", REPLIES - LOW_TRACTION),
    "PostEmbeddingRequestWithSummaryForReplyRecoveryStreamTaskGenerator": gen(
        "post_embedding_with_summary_for_reply_recovery",
        "requests.embedding_with_summary.for_reply.recovery",
        {"post_embedding_with_summary_for_reply"}, "recovery", REPLIES),
    "PostStreamRecoveryTaskGenerator": gen(
        "post_stream_recovery", "posts.recovery", BANGER, "recovery", NOT_REPLIES_UNPROTECTED),
    "SafetyPtosRecoveryStreamTaskGenerator": gen(
        "safety_ptos_recovery", "safety_ptos.recovery", PTOS, "recovery", EVERYTHING),
    "SafetyPtosDeluxeStreamTaskGenerator": gen(
        "safety_ptos_deluxe", "safety_ptos.deluxe", PTOS, "deluxe", EVERYTHING),
    "PostStreamTestTaskGenerator": gen(
        "post_stream_test", "posts.test", BANGER, "test", NOT_REPLIES_UNPROTECTED),
    "PostSafetyStreamTaskGenerator": gen(
        "post_safety_stream", "posts.popular", {"post_safety"}, "realtime",
        NOT_REPLIES_UNPROTECTED - LOW_TRACTION - {"unpopular"}),
    "PostStreamDelayedTaskGenerator": gen(
        "post_stream_delayed", "posts.delayed", set(), "delayed", EVERYTHING),
    "ReplyRankingRecoveryTaskGenerator": gen(
        "reply_ranking_recovery", "reply_ranking.recovery", {"reply_ranking"}, "recovery",
        {"reply_to_big", "reply_to_bot"}),
    "PostEmbeddingRequestWithSummaryStreamTaskGenerator": gen(
        "post_embedding_request_with_summary", "requests.embedding_with_summary",
        {"post_embedding_with_summary"}, "realtime", EVERYTHING),
    "PostEmbeddingRequestWithSummaryRecoveryStreamTaskGenerator": gen(
        "post_embedding_request_with_summary_recovery",
        "requests.embedding_with_summary.recovery", {"post_embedding_with_summary"},
        "recovery", EVERYTHING),
    "PostEmbeddingV5StreamTaskGenerator": gen(
        "post_embedding_v5", "requests.embedding_with_summary", {"mm_emb_v5"}, "realtime",
        EVERYTHING),
}
DEFAULT_YAML = resources.files("grebe") / "data" / "default.yaml"


def default_config() -> GrebeConfig:
    return load_config(str(DEFAULT_YAML))


def origins() -> dict[str, str]:
    """Stream name -> the origin its comment names (`grox: <class>` or `grebe:`)."""
    found: dict[str, str] = {}
    origin: str | None = None
    for line in DEFAULT_YAML.read_text().splitlines():
        if m := re.match(r"\s*# (?:grox: (\w+)|(grebe):)", line):
            origin = m.group(1) or m.group(2)
        elif m := re.match(r"\s*- \{name: ([\w.]+)", line):
            assert origin is not None, f"stream {m.group(1)} has no origin comment"
            found[m.group(1)], origin = origin, None
    return found


def test_default_yaml_maps_the_sixteen_generators_one_for_one() -> None:
    streams = {s.name: s for s in default_config().streams}
    named = origins()
    assert set(named) == set(streams)
    grox = {stream: origin for stream, origin in named.items() if origin != "grebe"}
    assert grox == {g.stream: name for name, g in GROX.items()}
    assert len(grox) == 16
    # Streams sharing a topic read it in different consumer groups (each sees every post).
    seen: dict[tuple[str, str], str] = {}
    for stream in streams.values():
        key = (stream.topic, stream.group)
        assert key not in seen, f"{stream.name} and {seen[key]} share topic and group"
        seen[key] = stream.name


def test_the_posts_topic_still_reaches_safety_and_embeddings() -> None:
    """`grebe ingest posts.jsonl && grebe run` with no config: originals on `posts` get
    the safety and embedding flows (Grox's unified stream runs only reply flows)."""
    on_posts = [s for s in default_config().streams if s.topic == "posts"]
    reaching = {e for s in on_posts if s.selection.post_types.count("original")
                for e in s.eligibilities}
    assert {"post_safety", "post_embedding_with_summary"} <= reaching


class RecordingMaster(PlanMaster):
    """The plan master's place: records what reaches the plans."""

    def __init__(self) -> None:
        super().__init__([])
        self.seen: list[TaskPayload] = []

    async def run(self, payload: TaskPayload) -> TaskResult:
        self.seen.append(payload)
        return TaskResult(payload_id=payload.payload_id, post_id=payload.post.id, success=True)


async def run_stream(stream: StreamConfig) -> tuple[list[TaskPayload], MemorySource]:
    source = MemorySource(stream.name)
    for envelope in CRAFTED.values():
        source.put(msgspec.json.encode(envelope))
    recorder = RecordingMaster()
    executor = InlineExecutor(SelectingMaster(recorder, selections([stream])))
    await executor.start()
    dispatcher = Dispatcher([Stream(source, stream_settings(stream))], executor, config())
    try:
        async with Running(dispatcher):
            async with asyncio.timeout(10):
                await source.wait_acked(len(CRAFTED))
    finally:
        await executor.stop()
    return recorder.seen, source


@pytest.mark.parametrize("generator", sorted(GROX))
async def test_each_generator_selects_exactly_its_posts(generator: str) -> None:
    expected = GROX[generator]
    stream = {s.name: s for s in default_config().streams}[expected.stream]
    assert stream.topic == expected.topic
    seen, source = await run_stream(stream)
    assert {p.post.id for p in seen} == expected.selects
    for payload in seen:
        assert payload.eligibilities == expected.eligibilities
        assert payload.mode == expected.mode
        assert payload.source == expected.stream
    assert {a.outcome for a in source.acks} == {Outcome.DONE}
    assert source.dead_letters == []
