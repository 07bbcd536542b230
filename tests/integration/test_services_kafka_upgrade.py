"""`scripts/services.sh up kafka` upgrades a broker that an older script started with
only its PLAINTEXT listener: it restarts it with the SASL_SSL and mTLS listeners, adds
the SCRAM users its storage lacks, and keeps its data.

The old broker is made here as the previous script made it (PLAINTEXT-only
server.properties, storage formatted without SCRAM users, the JVM started detached
with its pid in the checkout's pid file), on free ports with a scratch storage
(`.cache/kafka-<port>`), so the shared broker on 9092 is never touched."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from grebe.brokers.kafka import KafkaProducer, create_topic, topic_partitions
from grebe.config import KafkaConfig
from grebe.errors import BrokerError

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "scripts" / "services.sh"
HOST = "127.0.0.1"
VERSION = os.environ.get("GREBE_KAFKA_VERSION", "3.9.1")
CACHE = Path(os.environ.get("GREBE_CACHE_DIR", Path.home() / ".cache" / "grebe"))
LIBS = CACHE / f"kafka-{VERSION}" / "libs"


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for sock in socks:
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _java(*args: str) -> str:
    return subprocess.run(["java", "-Xmx256m", "-cp", f"{LIBS}/*", *args], check=True,
                          capture_output=True, text=True, timeout=120).stdout.strip()


def _services_up(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SERVICES), "up", "kafka"], env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture
def old_broker() -> Iterator[dict[str, str]]:
    """A PLAINTEXT-only broker as the previous services.sh started it."""
    if not (LIBS / f".complete-{VERSION}").exists():
        subprocess.run(["bash", str(SERVICES), "tools"], check=True, timeout=600)
    plain, controller, sasl_ssl, mtls = _free_ports(4)
    env = {**os.environ, "GREBE_KAFKA_PORT": str(plain),
           "GREBE_KAFKA_CONTROLLER_PORT": str(controller),
           "GREBE_KAFKA_SASL_SSL_PORT": str(sasl_ssl), "GREBE_KAFKA_MTLS_PORT": str(mtls)}
    home = ROOT / ".cache" / f"kafka-{plain}"
    (home / "data").mkdir(parents=True)
    properties = home / "server.properties"
    properties.write_text("\n".join([
        "process.roles=broker,controller", "node.id=1",
        f"controller.quorum.voters=1@{HOST}:{controller}",
        f"listeners=PLAINTEXT://{HOST}:{plain},CONTROLLER://{HOST}:{controller}",
        f"advertised.listeners=PLAINTEXT://{HOST}:{plain}",
        "controller.listener.names=CONTROLLER", "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        f"log.dirs={home / 'data'}", "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=2", "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1", "group.initial.rebalance.delay.ms=0", ""]))
    _java("kafka.tools.StorageTool", "format", "-t", _java("kafka.tools.StorageTool",
          "random-uuid"), "-c", str(properties))
    with (home / "old.out").open("wb") as out:
        jvm = subprocess.Popen(["java", "-Xms128m", "-Xmx512m", "-cp", f"{LIBS}/*",
                                "kafka.Kafka", str(properties)],
                               stdout=out, stderr=out, start_new_session=True)
    (ROOT / ".cache" / "services" / f"kafka-{plain}.pid").write_text(f"{jvm.pid}\n")
    try:
        yield env
    finally:
        subprocess.run(["bash", str(SERVICES), "down", "kafka"], env=env, timeout=120)
        if jvm.poll() is None:  # the upgrade failed before stopping it
            jvm.kill()
        jvm.wait(30)
        shutil.rmtree(home, ignore_errors=True)


async def test_up_restarts_an_old_plaintext_broker_with_the_secured_listeners(
    old_broker: dict[str, str]
) -> None:
    env = old_broker
    plaintext = KafkaConfig(bootstrap_servers=f"{HOST}:{env['GREBE_KAFKA_PORT']}")
    kept = f"kept-{uuid.uuid4().hex[:8]}"
    async with asyncio.timeout(90):  # the old broker's JVM is starting
        while True:
            try:
                await create_topic(plaintext, kept, 2)
                break
            except BrokerError:
                await asyncio.sleep(0.5)

    up = await asyncio.to_thread(_services_up, env)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "restarting" in up.stdout and "adding SCRAM" in up.stdout

    from tests.integration.test_kafka_security import TLS

    tls = Path(env.get("GREBE_KAFKA_TLS_DIR") or TLS)
    scram = KafkaConfig(
        bootstrap_servers=f"{HOST}:{env['GREBE_KAFKA_SASL_SSL_PORT']}",
        security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="grebe",
        sasl_password="grebe-secret", ssl_cafile=tls / "ca.pem",  # type: ignore[arg-type]
    )
    assert await topic_partitions(scram, [kept]) == {kept: 2}  # data kept, SCRAM login works
    producer = KafkaProducer(scram)
    await producer.start()
    try:
        await producer.publish(kept, None, b"after the upgrade")
    finally:
        await producer.stop()

    again = await asyncio.to_thread(_services_up, env)
    assert again.returncode == 0 and "already running" in again.stdout  # no second restart
