"""The local broker: an embedded SQLite log (brokers/local*.py), the laptop default."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

from pydantic import Field

from grebe import constants as C
from grebe.brokers.backend import BrokerBackend, BrokerSettings, ProducerRole

if TYPE_CHECKING:
    from grebe.brokers.dead_letters import DeadLetterAccess
    from grebe.brokers.local import LocalLog
    from grebe.brokers.local_retention import RetentionPolicy
    from grebe.config import GrebeConfig, StreamConfig
    from grebe.core.source import Producer, Source

NAME = "local"


class LocalBrokerConfig(BrokerSettings):
    """The embedded SQLite log. WAL with synchronous=NORMAL survives kill -9 (a commit is
    in the WAL, i.e. in the OS, before it returns); FULL also fsyncs every commit, which
    only matters for power loss or a kernel crash."""

    path: Path | None = None  # default: <data_dir>/log.db
    partitions: int = Field(default=C.DEFAULT_LOCAL_PARTITIONS, ge=1, le=255)
    synchronous: Literal["NORMAL", "FULL"] = C.DEFAULT_LOCAL_SYNCHRONOUS
    commit_interval_s: float = Field(default=C.DEFAULT_COMMIT_INTERVAL_S, ge=0)
    # Store values zstd-compressed against the packaged log dictionary (~2.5x smaller
    # for annotations); readers get the same bytes either way, and read both kinds.
    compress_values: bool = True
    # Retention (brokers/local_retention.py): never past a consumer group's uncommitted
    # offset; None turns a limit off. Dead letters are exempt unless listed otherwise.
    retention_s: float | None = Field(default=C.DEFAULT_LOCAL_RETENTION_S, gt=0)
    # ...and of the output topic (`output.topic`, when it is on this log): None follows
    # retention_s. It repeats the annotation store, so it need not stay a week.
    output_retention_s: float | None = Field(default=C.DEFAULT_LOCAL_OUTPUT_RETENTION_S, gt=0)
    retention_bytes: int | None = Field(default=None, gt=0)  # per partition
    retention_interval_s: float = Field(default=C.DEFAULT_LOCAL_RETENTION_INTERVAL_S, gt=0)
    retention_exempt: list[str] | None = None  # default: the dead-letter topic


def _settings(config: GrebeConfig) -> LocalBrokerConfig:
    return cast(LocalBrokerConfig, BACKEND.settings_of(config))


def local_log(config: GrebeConfig) -> LocalLog:
    """A new connection to the configured local log (not yet opened)."""
    from grebe.brokers.local import LocalLog

    local = _settings(config)
    return LocalLog(config.log_path, partitions=local.partitions,
                    synchronous=local.synchronous, compress=local.compress_values)


def local_retention(config: GrebeConfig) -> RetentionPolicy:
    """The local log's retention policy from `local.retention_*`."""
    from grebe.brokers.local_retention import RetentionPolicy

    local = _settings(config)
    exempt = local.retention_exempt
    by_topic = ({} if local.output_retention_s is None or config.output.broker != NAME
                else {config.output.topic: local.output_retention_s})
    return RetentionPolicy(
        max_age_s=local.retention_s, max_bytes=local.retention_bytes,
        interval_s=local.retention_interval_s, max_age_by_topic=by_topic,
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


def _source(stream: StreamConfig, config: GrebeConfig) -> Source:
    from grebe.brokers.local import LocalSource

    local = _settings(config)
    return LocalSource(
        stream.name, local_log(config), topic=stream.topic, group=stream.group,
        dead_letter_topic=config.dispatcher.dead_letter_topic,
        commit_interval_s=local.commit_interval_s,
        retention=local_retention(config),
    )


def _producer(config: GrebeConfig, topic: str, role: ProducerRole) -> Producer:
    from grebe.brokers.local import LocalProducer

    return LocalProducer(local_log(config))  # topics are created on first use


def _dead_letters(config: GrebeConfig) -> DeadLetterAccess:
    from grebe.brokers.local_dlq import LocalDeadLetters

    return LocalDeadLetters(local_log(config), config.dispatcher.dead_letter_topic)


BACKEND = BrokerBackend(
    name=NAME, settings=LocalBrokerConfig, build_source=_source, build_producer=_producer,
    dead_letters=_dead_letters,
)
