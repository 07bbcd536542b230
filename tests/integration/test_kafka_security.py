"""grebe against the secured listeners of the real broker of scripts/services.sh:
SASL_SSL (SCRAM-SHA-512, PLAIN) and SSL with client certificates (mTLS), through grebe's
own source, producer, dead-letter producer and admin client; a refused login is a clear
error at once; `grebe run --exit-when-done` on a SASL_SSL stream end to end.

The listeners (9094 SASL_SSL, 9095 mTLS; GREBE_KAFKA_SASL_SSL_PORT / GREBE_KAFKA_MTLS_PORT
move them) and the test CA in ~/.cache/grebe/kafka-tls/ come from `services.sh up
kafka`, which this module runs when they are closed; still closed afterwards is a
failure, never a skip."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from grebe.brokers.dead_letters import Replay
from grebe.brokers.kafka import (
    KafkaProducer,
    KafkaSource,
    admin_client,
    create_topic,
    delete_topic,
    topic_partitions,
)
from grebe.brokers.kafka_dlq import KafkaDeadLetters
from grebe.brokers.kafka_security import kafka_client_kwargs
from grebe.codec import decode_dead_letter, encode
from grebe.config import KafkaConfig
from grebe.core.source import Message, Outcome
from grebe.errors import BrokerError, ConfigError
from grebe.types import DeadLetter

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
SASL_SSL_PORT = int(os.environ.get("GREBE_KAFKA_SASL_SSL_PORT", "9094"))
MTLS_PORT = int(os.environ.get("GREBE_KAFKA_MTLS_PORT", "9095"))
# Where scripts/services.sh keeps the test CA: machine-wide, like the Kafka jars.
TLS = Path(os.environ.get("GREBE_KAFKA_TLS_DIR") or Path(
    os.environ.get("GREBE_CACHE_DIR") or Path.home() / ".cache" / "grebe") / "kafka-tls")
USER, PASSWORD = "grebe", "grebe-secret"  # the test users of scripts/services.sh
WRONG_PASSWORD = "not-the-password-42"
GREBE = str(Path(sys.executable).with_name("grebe"))


def _port_open(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


@pytest.fixture(scope="module")
def secure_listeners() -> None:
    """`services.sh up kafka` when a secured listener is closed (it also upgrades a
    broker an older script started); a listener still missing fails the test."""
    if _port_open(SASL_SSL_PORT) and _port_open(MTLS_PORT):
        if not (TLS / "ca.pem").is_file():
            pytest.fail(f"Kafka's secured listeners are up but {TLS} holds no test CA: the "
                        "broker was started with another GREBE_KAFKA_TLS_DIR; set it to "
                        "that directory")
        return
    result = subprocess.run(["bash", str(ROOT / "scripts" / "services.sh"), "up", "kafka"],
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0 or not (_port_open(SASL_SSL_PORT) and _port_open(MTLS_PORT)):
        pytest.fail(f"Kafka's SASL_SSL ({SASL_SSL_PORT}) / mTLS ({MTLS_PORT}) listeners are "
                    f"not up after scripts/services.sh up kafka:\n{result.stdout}{result.stderr}")


def sasl_config(mechanism: str = "SCRAM-SHA-512", password: str = PASSWORD) -> KafkaConfig:
    return KafkaConfig(
        bootstrap_servers=f"{HOST}:{SASL_SSL_PORT}", security_protocol="SASL_SSL",
        sasl_mechanism=mechanism, sasl_username=USER, sasl_password=password,  # type: ignore[arg-type]
        ssl_cafile=TLS / "ca.pem", session_timeout_ms=6000, commit_interval_s=0.02,
    )


def mtls_config(with_certificate: bool = True) -> KafkaConfig:
    client = {"ssl_certfile": TLS / "client.pem", "ssl_keyfile": TLS / "client.key"}
    return KafkaConfig(
        bootstrap_servers=f"{HOST}:{MTLS_PORT}", security_protocol="SSL",
        ssl_cafile=TLS / "ca.pem", session_timeout_ms=6000, commit_interval_s=0.02,
        **(client if with_certificate else {}),  # type: ignore[arg-type]
    )


SECURED = {
    "sasl-scram-sha-512": lambda: sasl_config("SCRAM-SHA-512"),
    "sasl-plain": lambda: sasl_config("PLAIN"),
    "mtls": mtls_config,
}


@pytest.fixture(params=sorted(SECURED))
async def secured(request: pytest.FixtureRequest, secure_listeners: None
                  ) -> AsyncIterator[tuple[KafkaConfig, str]]:
    """A secured config and a fresh 2-partition topic, created over that listener."""
    config = SECURED[request.param]()
    topic = f"sec-{request.param}-{uuid.uuid4().hex[:8]}"
    await create_topic(config, topic, 2)
    yield config, topic
    for name in (topic, f"{topic}-dead"):
        await delete_topic(config, name)


async def _poll_n(source: KafkaSource, n: int) -> list[Message]:
    got: list[Message] = []
    async with asyncio.timeout(30):
        while len(got) < n:
            got += await source.poll(n - len(got), 0.5)
    return got


async def _committed(config: KafkaConfig, group: str, topic: str) -> int:
    admin = admin_client(config)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return sum(meta.offset for tp, meta in offsets.items() if tp.topic == topic)


async def test_round_trip_produce_consume_commit_and_dead_letter(
    secured: tuple[KafkaConfig, str], caplog: pytest.LogCaptureFixture
) -> None:
    config, topic = secured
    caplog.set_level(logging.DEBUG)  # aiokafka's request logs included
    producer = KafkaProducer(config)
    await producer.start()
    try:
        await producer.publish_many(topic, [(f"k{i}".encode(), f"m{i}".encode())
                                            for i in range(6)])
    finally:
        await producer.stop()
    group = f"g-{uuid.uuid4().hex[:8]}"
    source = KafkaSource("posts", config, topic=topic, group=group,
                         dead_letter_topic=f"{topic}-dead")  # created over TLS too
    await source.start()
    try:
        messages = await _poll_n(source, 6)
        assert sorted(m.value for m in messages) == [f"m{i}".encode() for i in range(6)]
        dead, *done = messages
        for message in done:
            await source.ack(message, Outcome.DONE)
        record = DeadLetter(source="posts", reason="max_attempts", attempts=3,
                            last_error="boom", original=dead.value,
                            partition=dead.partition, offset=dead.offset)
        await source.ack(dead, Outcome.DEAD, reason="max_attempts", dead_letter=encode(record))
        await source.commit()
    finally:
        await source.stop()
    assert await _committed(config, group, topic) == 6

    # `grebe dlq list` and `replay` over the same listener (their own consumer group).
    dead_letters = KafkaDeadLetters(config, f"{topic}-dead")
    [stored] = await dead_letters.peek(10)
    assert decode_dead_letter(stored.value).original == dead.value
    report = await dead_letters.replay(
        lambda value: Replay(topic, b"again", decode_dead_letter(value).original))
    assert report.replayed == 1
    [count] = (await topic_partitions(config, [topic])).values()
    reader = AIOKafkaConsumer(enable_auto_commit=False, **kafka_client_kwargs(config))
    await reader.start()
    try:
        ends = await reader.end_offsets([TopicPartition(topic, p) for p in range(count)])
    finally:
        await reader.stop()
    assert sum(ends.values()) == 7  # the six posts and the replayed one
    assert PASSWORD not in caplog.text


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
async def test_wrong_password_is_a_clear_config_error_at_once(
    secure_listeners: None, caplog: pytest.LogCaptureFixture, mechanism: str
) -> None:
    config = sasl_config(mechanism, password=WRONG_PASSWORD)
    caplog.set_level(logging.DEBUG)
    for start in (KafkaProducer(config).start,
                  KafkaSource("posts", config, topic="any").start,
                  lambda: create_topic(config, "never-made", 1)):
        began = time.monotonic()
        with pytest.raises(ConfigError) as caught:
            await start()
        assert time.monotonic() - began < 20  # an answer, not aiokafka's 40 s retries
        message = str(caught.value)
        assert "refused the SASL login" in message and "kafka.sasl_password" in message
        assert mechanism in message and WRONG_PASSWORD not in message
    assert WRONG_PASSWORD not in caplog.text


async def test_mtls_without_a_client_certificate_is_a_config_error(
    secure_listeners: None
) -> None:
    with pytest.raises(ConfigError, match=r"refused the TLS client certificate "
                                          r"\(kafka\.ssl_certfile unset\)"):
        await create_topic(mtls_config(with_certificate=False), "never-made", 1)


async def test_a_broker_that_is_down_stays_a_broker_error(secure_listeners: None) -> None:
    """Only a refusal is a config error: a closed port is a broker fault (retried)."""
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind((HOST, 0))
        port = sock.getsockname()[1]
    config = sasl_config().model_copy(update={"bootstrap_servers": f"{HOST}:{port}"})
    with pytest.raises(BrokerError, match=f"{HOST}:{port}"):
        await KafkaProducer(config).start()


async def test_an_untrusted_broker_certificate_is_a_config_error(
    secure_listeners: None
) -> None:
    config = sasl_config().model_copy(update={"ssl_cafile": None})  # system CAs only
    with pytest.raises(ConfigError, match=r"not trusted \(kafka\.ssl_cafile unset"):
        await KafkaProducer(config).start()


async def test_grebe_run_with_a_wrong_password_exits_1_naming_the_field(
    secure_listeners: None, tmp_path: Path
) -> None:
    path = tmp_path / "grebe.yaml"
    path.write_text(json.dumps({
        "data_dir": str(tmp_path / "var"),
        "streams": [{"name": "posts", "broker": "kafka", "topic": "any", "group": "g",
                     "eligibilities": ["basic"]}],
        "kafka": {"bootstrap_servers": f"{HOST}:{SASL_SSL_PORT}",
                  "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                  "sasl_username": USER, "ssl_cafile": str(TLS / "ca.pem")},
        "engine": {"processes": 0}, "metrics": {"enabled": False},
    }))
    env = {**os.environ, "GREBE_KAFKA__SASL_PASSWORD": WRONG_PASSWORD, "COLUMNS": "400"}
    run = await asyncio.to_thread(
        subprocess.run, [GREBE, "run", "-c", str(path), "--exit-when-done"],
        capture_output=True, text=True, timeout=120, env=env)
    log = run.stdout + run.stderr
    assert run.returncode == 1, log[-4000:]
    assert "refused the SASL login" in log and "kafka.sasl_password" in log
    assert WRONG_PASSWORD not in log


@pytest.mark.slow
async def test_grebe_run_exit_when_done_on_a_sasl_ssl_stream(
    secure_listeners: None, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    config = sasl_config("SCRAM-SHA-512")
    topic, output, group = f"sec-in-{tag}", f"sec-out-{tag}", f"sec-{tag}"
    await create_topic(config, topic, 2)
    posts = 40
    producer = KafkaProducer(config)
    await producer.start()
    try:
        await producer.publish_many(topic, [
            (f"p{i}".encode(), json.dumps({"id": f"p{i}", "author_id": "a1",
                                           "text": f"Post number {i}"}).encode())
            for i in range(posts)])
    finally:
        await producer.stop()
    path = tmp_path / "grebe.yaml"
    path.write_text(json.dumps({  # everything but the password, which comes from the env
        "data_dir": str(tmp_path / "var"),
        "streams": [{"name": "posts", "broker": "kafka", "topic": topic, "group": group,
                     "eligibilities": ["basic"]}],
        "kafka": {"bootstrap_servers": config.bootstrap_servers,
                  "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                  "sasl_username": USER, "ssl_cafile": str(TLS / "ca.pem"),
                  "session_timeout_ms": 6000},
        "output": {"broker": "kafka", "topic": output},
        "engine": {"processes": 0, "drain_window_s": 5},
        "metrics": {"enabled": False},
    }))
    env = {**os.environ, "GREBE_KAFKA__SASL_PASSWORD": PASSWORD}
    try:
        run = await asyncio.to_thread(
            subprocess.run, [GREBE, "run", "-c", str(path), "--exit-when-done"],
            capture_output=True, text=True, timeout=180, env=env)
        log = run.stdout + run.stderr
        assert run.returncode == 0, log[-4000:]
        assert "stopping: done" in log and PASSWORD not in log
        assert await _committed(config, group, topic) == posts
        [count] = (await topic_partitions(config, [output])).values()
        reader = AIOKafkaConsumer(auto_offset_reset="earliest", enable_auto_commit=False,
                                  **kafka_client_kwargs(config))
        await reader.start()
        try:
            ends = await reader.end_offsets([TopicPartition(output, p) for p in range(count)])
        finally:
            await reader.stop()
        assert sum(ends.values()) == posts  # each post's result published over SASL_SSL
    finally:
        for name in (topic, output):
            await delete_topic(config, name)
