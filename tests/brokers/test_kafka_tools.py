"""scripts/kafka-topics.sh and scripts/kafka-consumer-groups.sh run Kafka's own tools
against the live broker (the jars scripts/services.sh caches; fetched on first use)."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from grebe.brokers.kafka import topic_partitions

pytestmark = pytest.mark.integration

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _tool(name: str, *args: str) -> str:
    done = subprocess.run([str(SCRIPTS / name), *args], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def _commit(bootstrap: str, topic: str, group: str) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.commit({TopicPartition(topic, 0): 0})
    finally:
        await consumer.stop()


def test_kafka_topics_and_consumer_groups_scripts_work_on_the_live_broker(
    kafka_bootstrap: str,
) -> None:
    topic, group = f"tools-{uuid.uuid4().hex[:8]}", f"tools-group-{uuid.uuid4().hex[:8]}"
    server = ["--bootstrap-server", kafka_bootstrap]
    _tool("kafka-topics.sh", *server, "--create", "--topic", topic, "--partitions", "2",
          "--replication-factor", "1")
    try:
        assert asyncio.run(topic_partitions(kafka_bootstrap, [topic])) == {topic: 2}
        described = _tool("kafka-topics.sh", *server, "--describe", "--topic", topic)
        assert "PartitionCount: 2" in described

        asyncio.run(_commit(kafka_bootstrap, topic, group))
        groups = _tool("kafka-consumer-groups.sh", *server, "--describe", "--group", group)
        assert topic in groups and group in groups
    finally:
        _tool("kafka-topics.sh", *server, "--delete", "--topic", topic)
