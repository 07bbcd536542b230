"""Kafka topic administration: create, describe, delete (tests, benchmarks, first setup,
and the declared topics of `grebe.brokers.kafka_topics`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from grebe.brokers.kafka_security import kafka_client_kwargs, raise_if_refused
from grebe.config import KafkaConfig
from grebe.errors import BrokerError

_TOPIC_ALREADY_EXISTS = 36  # Kafka protocol error code


def as_kafka_config(cluster: KafkaConfig | str) -> KafkaConfig:
    """`cluster` as a KafkaConfig: a bare bootstrap string (tests, benchmarks) is a
    PLAINTEXT cluster; a config carries its security settings to the admin client."""
    return cluster if isinstance(cluster, KafkaConfig) else KafkaConfig(bootstrap_servers=cluster)


def admin_client(cluster: KafkaConfig | str) -> AIOKafkaAdminClient:
    """An admin client (not started) with the cluster's security settings."""
    return AIOKafkaAdminClient(**kafka_client_kwargs(as_kafka_config(cluster)))


async def create_topic(
    cluster: KafkaConfig | str, name: str, partitions: int, *, replication: int = 1,
    exist_ok: bool = True,
) -> None:
    """Create `name` with `partitions` partitions and wait until it has leaders."""
    bootstrap_servers = as_kafka_config(cluster).bootstrap_servers
    admin = admin_client(cluster)
    try:
        await admin.start()
        response = await admin.create_topics([NewTopic(name, partitions, replication)])
        for _topic, code, *rest in response.topic_errors:
            if code and not (code == _TOPIC_ALREADY_EXISTS and exist_ok):
                raise BrokerError(f"cannot create Kafka topic {name!r}: error {code} {rest}")
        deadline = time.monotonic() + 30
        while True:  # bounded: the controller propagates leaders within milliseconds
            topics = await admin.describe_topics([name])
            parts = topics[0]["partitions"] if topics else []
            if len(parts) >= partitions and all(p["leader"] >= 0 for p in parts):
                return
            if time.monotonic() > deadline:
                raise BrokerError(f"Kafka topic {name!r} has no leaders after 30s")
            await asyncio.sleep(0.05)
    except KafkaError as exc:
        await raise_if_refused(as_kafka_config(cluster), exc)
        raise BrokerError(f"Kafka admin at {bootstrap_servers}: {exc}") from exc
    finally:
        await admin.close()


async def topic_partitions(cluster: KafkaConfig | str, names: Sequence[str]) -> dict[str, int]:
    """{topic: partition count} of those of `names` that exist (no topic is created)."""
    from grebe.brokers.kafka_topics import describe_existing

    found = await describe_existing(cluster, names)
    return {name: partitions for name, (partitions, _) in found.items()}


async def delete_topic(cluster: KafkaConfig | str, name: str) -> None:
    admin = admin_client(cluster)
    try:
        await admin.start()
        await admin.delete_topics([name])
    except KafkaError as exc:
        await raise_if_refused(as_kafka_config(cluster), exc)
        raise BrokerError(f"Kafka admin at {as_kafka_config(cluster).bootstrap_servers}: "
                          f"{exc}") from exc
    finally:
        await admin.close()
