"""The Kafka broker (brokers/kafka*.py): its settings section and its backend.

aiokafka is imported by the builders only, so a config without Kafka never loads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

from pydantic import Field, SecretStr, model_validator

from grebe import constants as C
from grebe.brokers.backend import BrokerBackend, BrokerSettings, ProducerRole, TopicRow

if TYPE_CHECKING:
    from grebe.brokers.dead_letters import DeadLetterAccess
    from grebe.brokers.kafka_topics import TopicSpec
    from grebe.config import GrebeConfig, StreamConfig
    from grebe.core.source import Producer, Source

NAME = "kafka"


class KafkaTopicConfig(BrokerSettings):
    """One topic's declared shape; unset fields take the `kafka.*` defaults."""

    partitions: int | None = Field(default=None, ge=1)
    replication_factor: int | None = Field(default=None, ge=1)


class KafkaConfig(BrokerSettings):
    bootstrap_servers: str = "127.0.0.1:9092"
    # Topics grebe uses (stream inputs, output, dead letters) are declared, not left to
    # broker auto-create: created or checked at start and by `grebe topics`.
    partitions: int = Field(default=C.DEFAULT_KAFKA_PARTITIONS, ge=1)
    replication_factor: int = Field(default=C.DEFAULT_KAFKA_REPLICATION_FACTOR, ge=1)
    topics: dict[str, KafkaTopicConfig] = Field(default_factory=dict)  # per-topic shape
    # A missing *input* topic is an error at start (a typo would otherwise read nothing
    # and exit "done"); true creates it like the output and dead-letter topics.
    create_missing_topics: bool = False
    client_id: str = "grebe"
    fetch_max_records: int = Field(default=500, ge=1)
    session_timeout_ms: int = Field(default=30_000, ge=1000)
    revoke_grace_s: float = Field(default=5.0, ge=0)
    # Finished offsets are committed in batches, at most this long after the first ack.
    commit_interval_s: float = Field(default=C.DEFAULT_KAFKA_COMMIT_INTERVAL_S, ge=0)
    max_poll_interval_ms: int = Field(default=300_000, ge=1000)
    # Security, applied to every Kafka client grebe builds (brokers/kafka_security.py).
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    # SecretStr: shown as ********** in reprs, dumps and validation errors; set it from
    # the environment (GREBE_KAFKA__SASL_PASSWORD) rather than the file.
    sasl_password: SecretStr | None = None
    ssl_cafile: Path | None = None  # CA bundle (PEM) to verify the brokers; None: system CAs
    ssl_certfile: Path | None = None  # client certificate (PEM) for mTLS
    ssl_keyfile: Path | None = None  # its private key (PEM), if not inside ssl_certfile
    ssl_key_password: SecretStr | None = None  # of an encrypted ssl_keyfile
    ssl_check_hostname: bool = True

    @model_validator(mode="after")
    def _security_consistent(self) -> KafkaConfig:
        from grebe.brokers.kafka_security import security_problems

        if problems := security_problems(self):
            raise ValueError("; ".join(problems))
        return self


def _settings(config: GrebeConfig) -> KafkaConfig:
    return cast(KafkaConfig, BACKEND.settings_of(config))


def _source(stream: StreamConfig, config: GrebeConfig) -> Source:
    from grebe.brokers.kafka import KafkaSource

    return KafkaSource(
        stream.name, _settings(config), topic=stream.topic, group=stream.group,
        dead_letter_topic=config.dispatcher.dead_letter_topic,
    )


def _producer(config: GrebeConfig, topic: str, role: ProducerRole) -> Producer:
    """An input topic must exist (unless `kafka.create_missing_topics`); the output
    topic is created when missing."""
    from grebe.brokers.kafka_producer import KafkaProducer

    if role is ProducerRole.INPUT:
        return KafkaProducer(_settings(config), inputs=[topic])
    return KafkaProducer(_settings(config), topics=[topic])


def _dead_letters(config: GrebeConfig) -> DeadLetterAccess:
    from grebe.brokers.kafka_dlq import KafkaDeadLetters

    return KafkaDeadLetters(_settings(config), config.dispatcher.dead_letter_topic)


def _specs(config: GrebeConfig) -> list[TopicSpec]:
    """Every Kafka stream's input topic, the dead-letter topic (when a stream is on
    Kafka) and the output topic (when `output.broker` is kafka); first declaration wins."""
    from grebe.brokers.kafka_topics import topic_spec

    kafka = _settings(config)
    specs = [topic_spec(kafka, s.topic, "input") for s in config.streams if s.broker == NAME]
    if specs:
        specs.append(topic_spec(kafka, config.dispatcher.dead_letter_topic, "dead-letters"))
    if config.output.broker == NAME:
        specs.append(topic_spec(kafka, config.output.topic, "output"))
    unique = {spec.name: spec for spec in reversed(specs)}
    return [unique[name] for name in dict.fromkeys(s.name for s in specs)]


async def _inspect_topics(config: GrebeConfig) -> list[TopicRow]:
    if not (specs := _specs(config)):
        return []
    from grebe.brokers.kafka_topics import inspect_topics

    rows = []
    for state in await inspect_topics(_settings(config), specs):
        spec = state.spec
        found = (f"{state.partitions} partitions, replication {state.replication_factor}"
                 if state.exists else "-")
        rows.append(TopicRow(
            NAME, spec.name, spec.role,
            f"{spec.partitions} partitions, replication {spec.replication_factor}",
            found, tuple(state.differences()),
        ))
    return rows


async def _create_topics(config: GrebeConfig) -> list[str]:
    """Create every missing topic, inputs included (this is the explicit step)."""
    if not (specs := _specs(config)):
        return []
    from grebe.brokers.kafka_topics import create_missing, inspect_topics

    kafka = _settings(config)
    return await create_missing(kafka, await inspect_topics(kafka, specs))


BACKEND = BrokerBackend(
    name=NAME, settings=KafkaConfig, build_source=_source, build_producer=_producer,
    dead_letters=_dead_letters, inspect_topics=_inspect_topics, create_topics=_create_topics,
)
