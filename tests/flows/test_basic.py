"""The built-in `basic` plan reads text with the flows' signals and writes through the
flows' one sink (grebe.flows.text_signals, grebe.flows.sinks)."""

from __future__ import annotations

from grebe import codec
from grebe.core.planmaster import PlanMaster
from grebe.flows import basic, text_signals
from grebe.stores.base import MemoryStore
from grebe.types import Annotation, Post, TaskPayload

from .doubles import RecordingProducer


async def _annotate(text: str) -> tuple[Annotation, RecordingProducer]:
    store, producer = MemoryStore(), RecordingProducer()
    services = basic.BasicServices(store, producer, "out", basic.BasicSettings())
    master = PlanMaster([basic.basic_plan()], services=services)
    post = Post(id="p1", author_id="a", text=text)
    await master.run_plans(TaskPayload(payload_id="t", post=post,
                                       eligibilities=frozenset({"basic"})))
    (row,) = await store.get("p1")
    return row, producer


async def test_links_are_the_flows_links() -> None:
    text = "see www.example.com for more"
    assert text_signals.count_links(text) == 1
    row, _ = await _annotate(text)
    assert basic.LABEL_HAS_LINK in row.labels  # `www.` links count, as in the spam flow


async def test_shouting_ignores_the_letters_of_links() -> None:
    text = "ok see HTTPS://EXAMPLE.COM/BIG/PAGE/NAME thanks friend"
    assert text_signals.shouting(text, 8) < 0.7
    row, _ = await _annotate(text)
    assert basic.LABEL_SHOUTING not in row.labels
    assert row.scores[basic.SCORE_SHOUTING] == round(text_signals.shouting(text, 8), 4)


async def test_the_sink_stores_then_publishes_one_annotation() -> None:
    row, producer = await _annotate("HELLO THERE EVERYONE")
    assert row.producer == basic.PRODUCER and row.version == basic.VERSION
    assert basic.LABEL_SHOUTING in row.labels
    [(topic, key, value)] = producer.published
    assert (topic, key) == ("out", b"p1")
    assert codec.decode_annotation(value) == row
