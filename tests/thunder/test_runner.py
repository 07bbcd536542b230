"""Thunder's reader goes through the broker factory: it reads `thunder.topic` on the
broker of the stream that reads that topic, where `grebe thunder publish` writes it."""

from __future__ import annotations

import uuid

from grebe.brokers.factory import build_ingest_producer
from grebe.brokers.kafka import KafkaSource
from grebe.brokers.local import LocalSource
from grebe.brokers.memory import MemorySource
from grebe.brokers.memory_backend import memory_topic
from grebe.config import load_config
from grebe.thunder.runner import thunder_source


def _config(tmp_path, broker: str, topic: str):
    return load_config(
        data_dir=tmp_path,
        streams=[{"name": "posts", "broker": broker, "topic": topic}],
        thunder={"topic": topic, "group": f"thunder-{uuid.uuid4().hex}"},
    )


def test_thunder_reads_its_topic_on_the_broker_of_the_stream_reading_it(tmp_path) -> None:
    topic = f"thunder-{uuid.uuid4().hex}"
    kafka = _config(tmp_path, "kafka", topic)
    source = thunder_source(kafka, kafka.thunder, kafka.thunder.group)  # not started
    assert isinstance(source, KafkaSource)
    memory = _config(tmp_path, "memory", topic)
    assert thunder_source(memory, memory.thunder, "g") is memory_topic(topic)


async def test_what_publish_writes_is_what_thunder_reads(tmp_path) -> None:
    topic = f"thunder-{uuid.uuid4().hex}"
    config = _config(tmp_path, "memory", topic)
    producer = build_ingest_producer(config, config.thunder.topic)
    await producer.start()
    await producer.publish(topic, b"k", b'{"type": "post_delete", "post_id": "p"}')
    await producer.stop()
    source = thunder_source(config, config.thunder, "g")
    assert isinstance(source, MemorySource)
    (message,) = await source.poll(10, 1.0)
    assert message.value == b'{"type": "post_delete", "post_id": "p"}'


def test_with_no_stream_on_the_topic_thunder_reads_the_default_broker(tmp_path) -> None:
    config = load_config(data_dir=tmp_path, streams=[{"name": "posts"}],
                         thunder={"topic": f"thunder-{uuid.uuid4().hex}"})
    assert isinstance(thunder_source(config, config.thunder, "g"), LocalSource)
