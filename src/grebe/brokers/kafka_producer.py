"""The Kafka producer: output topics, dead letters, `grebe ingest` and the API."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from grebe.brokers.kafka_security import kafka_client_kwargs, raise_if_refused
from grebe.config import KafkaConfig
from grebe.errors import BrokerError, BrokerUnavailableError


class KafkaProducer:
    """Producer protocol on an idempotent, acks=all aiokafka producer: `publish` returns
    once the broker stored the record, without duplicates from its own retries."""

    def __init__(self, config: KafkaConfig, *, linger_ms: int = 5,
                 topics: Sequence[str] = (), inputs: Sequence[str] = ()) -> None:
        self._config = config
        self._linger_ms = linger_ms
        self._topics = list(topics)  # grebe's own output topics: created if missing
        self._inputs = list(inputs)  # stream topics (`grebe ingest`): must exist
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        if self._topics or self._inputs:  # declared, never left to broker auto-create
            from grebe.brokers.kafka_topics import ensure_topics, topic_spec

            await ensure_topics(self._config, [
                *(topic_spec(self._config, t, "output") for t in self._topics),
                *(topic_spec(self._config, t, "input") for t in self._inputs),
            ])
        producer = AIOKafkaProducer(
            **kafka_client_kwargs(self._config),
            client_id=f"{self._config.client_id}-producer",
            enable_idempotence=True,
            acks="all",
            linger_ms=self._linger_ms,
        )
        try:
            await producer.start()
        except KafkaError as exc:
            await producer.stop()
            await raise_if_refused(self._config, exc)
            raise BrokerError(
                f"cannot connect to Kafka at {self._config.bootstrap_servers}: {exc}"
            ) from exc
        self._producer = producer

    async def stop(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await producer.stop()  # flushes what is pending

    def _started(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise BrokerError("KafkaProducer used before start()")
        return self._producer

    async def publish(self, topic: str, key: bytes | None, value: bytes) -> None:
        try:
            delivery = await self._started().send(topic, value, key=key)
            await delivery
        except KafkaError as exc:
            raise BrokerUnavailableError(f"publish to Kafka topic {topic!r} failed: {exc}") from exc

    async def publish_many(
        self, topic: str, records: Sequence[tuple[bytes | None, bytes]]
    ) -> None:
        producer = self._started()
        try:
            deliveries = [await producer.send(topic, value, key=key) for key, value in records]
            await asyncio.gather(*deliveries)
        except KafkaError as exc:
            raise BrokerUnavailableError(f"publish to Kafka topic {topic!r} failed: {exc}") from exc
