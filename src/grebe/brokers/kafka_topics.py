"""Kafka topics as declared in config: what grebe wants, what the cluster has, and the
start-up check that never leaves a topic to broker auto-create.

Auto-create makes every topic with the broker's defaults (one partition, replication 1)
on first publish, with an "UNKNOWN_TOPIC_OR_PARTITION ... not found in cluster
metadata" error logged first; worse, a consumer subscribing to a mistyped input topic
gets an empty topic and `--exit-when-done` exits 0 having done nothing. So at start a
Kafka source and producer call `ensure_topics`: grebe's own topics (output, dead
letters) are created with their declared shape when missing, and a missing input topic
is a ConfigError naming it, unless `kafka.create_missing_topics` is set. An existing
topic whose shape differs from the declaration is logged (Kafka cannot shrink
partitions; `grebe topics check` names the difference).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from aiokafka.errors import KafkaError

from grebe import constants as C
from grebe.brokers.kafka_admin import admin_client, as_kafka_config, create_topic
from grebe.brokers.kafka_security import raise_if_refused
from grebe.config import KafkaConfig
from grebe.errors import BrokerError, ConfigError

log = logging.getLogger(__name__)

Role = Literal["input", "output", "dead-letters"]


@dataclass(frozen=True)
class TopicSpec:
    """A topic as the config wants it."""

    name: str
    role: Role
    partitions: int
    replication_factor: int


@dataclass(frozen=True)
class TopicState:
    """A declared topic beside what the cluster has (None: it does not exist)."""

    spec: TopicSpec
    partitions: int | None
    replication_factor: int | None

    @property
    def exists(self) -> bool:
        return self.partitions is not None

    def differences(self) -> list[str]:
        """What differs from the declaration, in words (empty: as declared)."""
        spec = self.spec
        if not self.exists:
            return ["missing"]
        found = []
        if self.partitions != spec.partitions:
            found.append(f"partitions {self.partitions}, config wants {spec.partitions}")
        if self.replication_factor != spec.replication_factor:
            found.append(f"replication factor {self.replication_factor}, config wants "
                         f"{spec.replication_factor}")
        return found


def topic_spec(config: KafkaConfig, name: str, role: Role) -> TopicSpec:
    """`name`'s declared shape: `kafka.topics.<name>`, else the defaults (dead-letter
    topics default to one partition, so `grebe dlq list` shows arrival order)."""
    declared = config.topics.get(name)
    default_partitions = (
        C.DEFAULT_DEAD_LETTER_PARTITIONS if role == "dead-letters" else config.partitions
    )
    partitions = declared.partitions if declared and declared.partitions else None
    replication = (
        declared.replication_factor if declared and declared.replication_factor else None
    )
    return TopicSpec(name, role, partitions or default_partitions,
                     replication or config.replication_factor)


async def inspect_topics(config: KafkaConfig, specs: Sequence[TopicSpec]) -> list[TopicState]:
    """Each declared topic beside the cluster's partitions and replication factor."""
    found = await describe_existing(config, [s.name for s in specs])
    return [TopicState(s, *found.get(s.name, (None, None))) for s in specs]


async def describe_existing(cluster: KafkaConfig | str, names: Sequence[str]
                            ) -> dict[str, tuple[int, int]]:
    """{topic: (partitions, replication factor)} of those of `names` that exist.

    Only existing topics are described: a metadata request naming a missing topic makes
    a broker with auto.create.topics.enable create it (aiokafka's describe_topics asks
    that way), which is the very thing this check is there to prevent."""
    bootstrap_servers = as_kafka_config(cluster).bootstrap_servers
    admin = admin_client(cluster)
    try:
        await admin.start()
        existing = set(await admin.list_topics())
        wanted = [name for name in dict.fromkeys(names) if name in existing]
        described = await admin.describe_topics(wanted) if wanted else []
    except KafkaError as exc:
        await raise_if_refused(as_kafka_config(cluster), exc)
        raise BrokerError(f"Kafka admin at {bootstrap_servers}: {exc}") from exc
    finally:
        await admin.close()
    found: dict[str, tuple[int, int]] = {}
    for topic in described:
        parts = topic.get("partitions") or []
        if not topic.get("error_code") and parts:
            found[topic["topic"]] = (len(parts), min(len(p["replicas"]) for p in parts))
    return found


async def create_missing(config: KafkaConfig, states: Sequence[TopicState]) -> list[str]:
    """Create every topic of `states` that does not exist; returns their names."""
    created = []
    for state in states:
        if not state.exists:
            spec = state.spec
            await create_topic(config, spec.name, spec.partitions,
                               replication=spec.replication_factor)
            log.info("created Kafka topic %r (%s): %d partitions, replication %d",
                     spec.name, spec.role, spec.partitions, spec.replication_factor)
            created.append(spec.name)
    return created


async def ensure_topics(config: KafkaConfig, specs: Sequence[TopicSpec]) -> None:
    """The start-up check: missing input topics are an error (unless
    `kafka.create_missing_topics`), other missing topics are created, differences of
    existing ones are logged."""
    states = await inspect_topics(config, specs)
    unknown = [s.spec.name for s in states
               if not s.exists and s.spec.role == "input" and not config.create_missing_topics]
    if unknown:
        raise ConfigError(
            f"Kafka input topic(s) {', '.join(map(repr, unknown))} do not exist at "
            f"{config.bootstrap_servers} (a typo in streams[].topic?). Create them with "
            "`grebe topics create`, or set kafka.create_missing_topics: true"
        )
    await create_missing(config, states)
    for state in states:
        if state.exists and (differences := state.differences()):
            log.warning("Kafka topic %r differs from its declaration: %s", state.spec.name,
                        "; ".join(differences))
