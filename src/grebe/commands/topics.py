"""`grebe topics`: the topics and queues the config wants, beside what the brokers have.

Kafka: every Kafka stream's input topic, the dead-letter topic (when a stream is on
Kafka) and the output topic (when `output.broker` is kafka), each with its declared
partitions and replication factor (`kafka.topics.<name>`, else the `kafka.*`
defaults). RabbitMQ: every RabbitMQ stream's queue (with `x-max-priority`) and the
dead-letter queue. The local log creates its topics on first use, so it has nothing to
declare. Each broker's backend says what it declares (`inspect_topics`,
`create_topics` in grebe.brokers.backend); this module only asks every broker in use.

`list` shows each one, `check` also fails when anything differs (missing, other
partitions or replication, other queue arguments), `create` creates what is missing.
An existing Kafka topic is never altered (partitions can only grow, and that moves
keys between partitions): `check` names the difference and the operator decides.
"""

from __future__ import annotations

from grebe import constants as C
from grebe.brokers.backend import BrokerBackend, TopicRow
from grebe.brokers.registry import backend
from grebe.config import GrebeConfig

__all__ = ["TopicRow", "create_topics", "topic_rows"]


def _backends(config: GrebeConfig) -> list[BrokerBackend]:
    """The backends of the streams and of the output, in config order, each once; each
    declares its own topics from the whole config (its `inspect_topics`)."""
    names = [s.broker for s in config.streams]
    if config.output.broker != C.NO_OUTPUT_BROKER:
        names.append(config.output.broker)
    return [backend(name) for name in dict.fromkeys(names)]


async def topic_rows(config: GrebeConfig) -> list[TopicRow]:
    """Every declared topic and queue with what its broker has."""
    rows: list[TopicRow] = []
    for broker in _backends(config):
        if broker.inspect_topics is not None:
            rows.extend(await broker.inspect_topics(config))
    return rows


async def create_topics(config: GrebeConfig) -> list[str]:
    """Create what is missing on every broker that declares topics (inputs included:
    this is the explicit step). Returns the topics created."""
    created: list[str] = []
    for broker in _backends(config):
        if broker.create_topics is not None:
            created.extend(await broker.create_topics(config))
    return created
