"""Build sources, producers and dead-letter access from the configuration: a lookup of
the broker by name in the registry (`grebe.brokers.registry`), so the runtime, the
commands and the flows never import a broker, and a new broker module needs no edit here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grebe import constants as C
from grebe.brokers.backend import ProducerRole
from grebe.brokers.local_backend import local_dead_letter_count, local_log, local_retention
from grebe.brokers.registry import backend

if TYPE_CHECKING:
    from grebe.brokers.dead_letters import DeadLetterAccess
    from grebe.config import GrebeConfig, StreamConfig
    from grebe.core.source import Producer, Source

__all__ = [
    "build_dead_letters", "build_ingest_producer", "build_producer", "build_source",
    "build_topic_source", "local_dead_letter_count", "local_log", "local_retention",
    "stream_broker",
]


def build_source(stream: StreamConfig, config: GrebeConfig) -> Source:
    """The source of one configured stream, from its broker's backend."""
    return backend(stream.broker).build_source(stream, config)


def build_topic_source(config: GrebeConfig, topic: str, *, name: str, group: str) -> Source:
    """A source on `topic` for a reader outside the configured streams (thunder's ingest
    and replay), on the broker `build_ingest_producer` writes `topic` to, so the reader and
    its writers always meet on one broker."""
    from grebe.config import StreamConfig  # grebe.config imports the broker modules

    stream = StreamConfig(name=name, broker=stream_broker(config, topic), topic=topic,
                          group=group)
    return build_source(stream, config)


def build_producer(config: GrebeConfig) -> Producer | None:
    """The producer for the output topic, or None when `output.broker` is "none"."""
    broker = config.output.broker
    if broker == C.NO_OUTPUT_BROKER:
        return None
    return backend(broker, what="output.broker").build_producer(
        config, config.output.topic, ProducerRole.OUTPUT)


def stream_broker(config: GrebeConfig, topic: str) -> str:
    """The broker of the stream that reads `topic` (the default broker when none does)."""
    return next((s.broker for s in config.streams if s.topic == topic), C.DEFAULT_BROKER)


def build_ingest_producer(config: GrebeConfig, topic: str) -> Producer:
    """A producer onto `topic` on the broker of the stream that reads it, for `grebe
    ingest`, the API and the demo (an input topic: Kafka's must exist unless
    `kafka.create_missing_topics`; a RabbitMQ queue is declared before publishing)."""
    return backend(stream_broker(config, topic)).build_producer(
        config, topic, ProducerRole.INPUT)


def build_dead_letters(broker: str, config: GrebeConfig) -> DeadLetterAccess:
    """Access to the dead letters that `broker`'s sources wrote (`grebe dlq`)."""
    return backend(broker).dead_letters(config)
