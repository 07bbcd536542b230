"""The API (`grebe serve`) with its intake stream on the real Kafka broker.

POST /v1/posts publishes to the stream's Kafka topic; the Runtime beside it consumes
that topic and annotates into a sqlite store. Checked on the broker: the records hold
the posts as sent, and a refused request (422) produces nothing.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from grebe import constants as C
from grebe.api.app import build_app
from grebe.api.intake import BrokerIntake
from grebe.api.service import ApiService
from grebe.brokers.kafka import KafkaSource, create_topic, delete_topic
from grebe.config import load_config

pytestmark = pytest.mark.integration

PARTITIONS = 3


@dataclass
class Api:
    service: ApiService
    client: httpx.AsyncClient
    bootstrap: str
    topic: str


@pytest.fixture
async def api(kafka_bootstrap: str, tmp_path: Path) -> AsyncIterator[Api]:
    tag = uuid.uuid4().hex[:8]
    topic, dead = f"api-in-{tag}", f"api-dead-{tag}"
    await create_topic(kafka_bootstrap, topic, PARTITIONS)
    await create_topic(kafka_bootstrap, dead, 1)
    config = load_config(
        data_dir=tmp_path,
        streams=[{"name": "posts", "broker": "kafka", "topic": topic, "group": f"api-{tag}",
                  "eligibilities": [C.BASIC_ELIGIBILITY]}],
        kafka={"bootstrap_servers": kafka_bootstrap, "session_timeout_ms": 6000,
               "commit_interval_s": 0.05, "revoke_grace_s": 1.0},
        dispatcher={"dead_letter_topic": dead},
        store={"backend": "sqlite", "sqlite_path": tmp_path / "annotations.db"},
        output={"broker": "none"},
        engine={"processes": 0, "drain_window_s": 5},
        plans={"factory": "grebe.flows.basic:build_bundle"},
        metrics={"enabled": False},
    )
    service = ApiService(config)
    await service.start()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(service)),
                               base_url="http://127.0.0.1",  # a Host grebe serves
                               headers={"content-type": "application/json"})
    try:
        yield Api(service, client, kafka_bootstrap, topic)
    finally:
        await client.aclose()
        await service.close()
        for name in (topic, dead):
            await delete_topic(kafka_bootstrap, name)


async def on_topic(api: Api) -> list[tuple[bytes | None, bytes]]:
    """Every record the topic holds now, as (key, value)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=api.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        parts = [TopicPartition(api.topic, p) for p in range(PARTITIONS)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        records: list[tuple[bytes | None, bytes]] = []
        async with asyncio.timeout(10):
            while [tp for tp in parts if await consumer.position(tp) < ends[tp]]:
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    records.extend((r.key, r.value) for r in batch)
        return records
    finally:
        await consumer.stop()


async def annotated(client: httpx.AsyncClient, post_id: str, timeout_s: float = 15) -> dict:
    """The post's annotations once the pipeline stored them (bounded wait)."""
    async with asyncio.timeout(timeout_s):
        while True:
            response = await client.get(f"/v1/posts/{post_id}/annotations")
            if response.status_code == 200:
                return response.json()
            assert response.status_code == 404, response.text
            await asyncio.sleep(0.1)


def post(i: int, text: str = "hello world") -> dict:
    return {"id": f"k{i}", "author_id": "a", "text": f"{text} {i}"}


async def test_posted_posts_reach_kafka_and_are_annotated(api: Api) -> None:
    # Both ends on Kafka: nothing here falls back to the local log.
    assert isinstance(api.service.intake, BrokerIntake)
    assert type(api.service.intake._producer).__name__ == "KafkaProducer"
    assert [type(s) for s in api.service.runtime.sources] == [KafkaSource]
    one = await api.client.post("/v1/posts", json={"post": post(0, "LOOK AT THIS RIGHT NOW")})
    assert one.status_code == 202, one.text
    assert one.json()["topic"] == api.topic and one.json()["post_ids"] == ["k0"]
    many = await api.client.post("/v1/posts", json=[post(1), post(2), {"post": post(3)}])
    assert many.status_code == 202, many.text
    body = many.json()
    assert body["accepted"] == 3 and body["post_ids"] == ["k1", "k2", "k3"]
    assert body["payload_ids"] == [None, None, None]  # Kafka does not say where, up front

    # On the broker: keyed by post id, the bytes as sent.
    records = await on_topic(api)
    assert sorted(k or b"" for k, _ in records) == [b"k0", b"k1", b"k2", b"k3"]
    by_key = dict(records)
    assert json.loads(by_key[b"k2"]) == post(2)
    assert json.loads(by_key[b"k3"]) == {"post": post(3)}

    shout = await annotated(api.client, "k0")
    (annotation,) = shout["annotations"]
    assert annotation["producer"] == "basic" and "shouting" in annotation["labels"]
    for i in (1, 2, 3):
        got = await annotated(api.client, f"k{i}")
        assert got["annotations"][0]["scores"]["basic.words"] == 3.0
    assert api.service.metrics.posts_accepted == 4


async def test_bad_posts_get_422_and_nothing_is_produced(api: Api) -> None:
    bad = await api.client.post("/v1/posts", content=b'{"post": {"author_id": "x"}}')
    assert bad.status_code == 422  # no id (an id-only post is fine: it is hydrated)
    assert "`id`" in json.dumps(bad.json()["problems"])
    # One bad item refuses the whole array: the good ones are not produced either.
    mixed = await api.client.post("/v1/posts", content=json.dumps([post(7), "nonsense"]))
    assert mixed.status_code == 422
    assert [p["index"] for p in mixed.json()["problems"]] == [1]
    assert await on_topic(api) == []
    assert api.service.metrics.requests_refused == 2

    # The stream still takes good posts afterwards.
    ok = await api.client.post("/v1/posts", json=post(8))
    assert ok.status_code == 202
    assert [k for k, _ in await on_topic(api)] == [b"k8"]
    await annotated(api.client, "k8")
