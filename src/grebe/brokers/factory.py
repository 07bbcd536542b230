"""Build sources and producers from the configuration: the one place that maps a
broker name to a module, so the supervisor and the flows never import a broker."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grebe.config import GrebeConfig, StreamConfig
from grebe.core.source import Producer, Source
from grebe.errors import ConfigError

if TYPE_CHECKING:
    from grebe.brokers.dead_letters import DeadLetterAccess
    from grebe.brokers.local import LocalLog
    from grebe.brokers.local_retention import RetentionPolicy


def local_retention(config: GrebeConfig) -> RetentionPolicy:
    """The local log's retention policy from `local.retention_*`."""
    from grebe.brokers.local_retention import RetentionPolicy

    local = config.local
    exempt = local.retention_exempt
    return RetentionPolicy(
        max_age_s=local.retention_s, max_bytes=local.retention_bytes,
        interval_s=local.retention_interval_s,
        exempt=frozenset([config.dispatcher.dead_letter_topic] if exempt is None else exempt),
    )


async def local_dead_letter_count(config: GrebeConfig) -> int:
    """Dead letters in the local log's dead-letter topic (the demo's and eval's tally)."""
    log = local_log(config)
    await log.open()
    try:
        return sum((await log.end_offsets(config.dispatcher.dead_letter_topic)).values())
    finally:
        await log.close()


def local_log(config: GrebeConfig) -> LocalLog:
    """A new connection to the configured local log (not yet opened)."""
    from grebe.brokers.local import LocalLog

    return LocalLog(
        config.log_path, partitions=config.local.partitions,
        synchronous=config.local.synchronous,
    )


def build_source(stream: StreamConfig, config: GrebeConfig) -> Source:
    """The source of one configured stream. Raises ConfigError for brokers not built in."""
    if stream.broker == "local":
        from grebe.brokers.local import LocalSource

        return LocalSource(
            stream.name, local_log(config), topic=stream.topic, group=stream.group,
            dead_letter_topic=config.dispatcher.dead_letter_topic,
            commit_interval_s=config.local.commit_interval_s,
            retention=local_retention(config),
        )
    if stream.broker == "kafka":
        from grebe.brokers.kafka import KafkaSource

        return KafkaSource(
            stream.name, config.kafka, topic=stream.topic, group=stream.group,
            dead_letter_topic=config.dispatcher.dead_letter_topic,
        )
    if stream.broker == "rabbitmq":
        from grebe.brokers.rabbitmq import RabbitSource

        return RabbitSource(
            stream.name, config.rabbitmq, queue=stream.topic,
            dead_letter_queue=config.dispatcher.dead_letter_topic,
            backoff_base_s=config.dispatcher.backoff_base_s,
            backoff_max_s=config.dispatcher.backoff_max_s,
        )
    raise ConfigError(
        f"stream {stream.name!r}: broker {stream.broker!r} is not available in this build "
        "(supported: local, kafka, rabbitmq)"
    )


def build_producer(config: GrebeConfig) -> Producer | None:
    """The producer for the output topic, or None when `output.broker` is "none"."""
    broker = config.output.broker
    if broker == "none":
        return None
    if broker == "local":
        from grebe.brokers.local import LocalProducer

        return LocalProducer(local_log(config))
    if broker == "kafka":
        from grebe.brokers.kafka import KafkaProducer

        return KafkaProducer(config.kafka, topics=[config.output.topic])
    raise ConfigError(
        f"output.broker {broker!r} is not available in this build (supported: local, kafka, "
        "none)"
    )


def build_ingest_producer(config: GrebeConfig, topic: str) -> Producer:
    """A producer onto `topic` on the broker of the stream that reads it (the local log
    when no stream does), for `grebe ingest`. A Kafka input topic must exist (unless
    `kafka.create_missing_topics`); a RabbitMQ queue is declared before publishing."""
    broker = next((s.broker for s in config.streams if s.topic == topic), "local")
    if broker == "kafka":
        from grebe.brokers.kafka import KafkaProducer

        return KafkaProducer(config.kafka, inputs=[topic])
    if broker == "rabbitmq":
        from grebe.brokers.rabbitmq_producer import RabbitProducer

        return RabbitProducer(config.rabbitmq)
    from grebe.brokers.local import LocalProducer

    return LocalProducer(local_log(config))


def build_dead_letters(broker: str, config: GrebeConfig) -> DeadLetterAccess:
    """Access to the dead letters that `broker`'s sources wrote (`grebe dlq`)."""
    topic = config.dispatcher.dead_letter_topic
    if broker == "local":
        from grebe.brokers.local_dlq import LocalDeadLetters

        return LocalDeadLetters(local_log(config), topic)
    if broker == "kafka":
        from grebe.brokers.kafka_dlq import KafkaDeadLetters

        return KafkaDeadLetters(config.kafka, topic)
    if broker == "rabbitmq":
        from grebe.brokers.rabbitmq_dlq import RabbitDeadLetters

        return RabbitDeadLetters(config.rabbitmq, topic)
    raise ConfigError(f"broker {broker!r} has no dead letters in this build "
                      "(supported: local, kafka, rabbitmq)")
