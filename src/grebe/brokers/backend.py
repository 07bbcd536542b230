"""What a broker module offers grebe: one `BrokerBackend` object.

A broker is one module, `grebe/brokers/<name>_backend.py` (or a third-party module named
by an entry point in the `grebe.brokers` group), with a module-level `BACKEND`. The
registry (`grebe.brokers.registry`) finds it; nothing else names the broker: streams and
`output.broker` refer to it by name, the runtime builds its sources, `grebe ingest`, the
API and the output sink its producers, `grebe dlq` its dead-letter access and `grebe
topics` its declared topics, all through this object.

Backend modules stay cheap to import (the config validates broker names against the
registry at every load): the client library of a broker is imported inside the
builders, when a stream actually uses it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from grebe.settings_base import Section

if TYPE_CHECKING:
    from grebe.brokers.dead_letters import DeadLetterAccess
    from grebe.config import GrebeConfig, StreamConfig
    from grebe.core.source import Producer, Source


class BrokerSettings(Section):
    """Base of a broker's settings section (`<name>:` in the config): unknown keys fail."""


class ProducerRole(StrEnum):
    """What a producer writes, which decides how a missing topic is treated."""

    INPUT = "input"  # a stream's topic (`grebe ingest`, POST /v1/posts): must exist
    OUTPUT = "output"  # `output.topic`: created where the broker creates topics


@runtime_checkable
class AppendsAtPositions(Protocol):
    """A producer that can say where each record landed (the local log), so the API
    can answer a submitted post with the payload id it will run under."""

    async def append_at(
        self, topic: str, records: Sequence[tuple[bytes | None, bytes]]
    ) -> list[tuple[int, int]]:
        """Append durably and in order; (partition, offset) of each record."""
        ...


@dataclass(frozen=True)
class TopicRow:
    """One topic or queue the config wants, beside what its broker has (`grebe topics`)."""

    broker: str
    name: str
    role: str  # input, output, dead-letters
    wanted: str  # the declared shape, in words
    found: str  # what the broker has, in words ("-" if missing)
    differences: tuple[str, ...]


@dataclass(frozen=True)
class BrokerBackend:
    """One broker, as the rest of grebe sees it. Builders take the whole config and pick
    their own section with `settings_of`."""

    name: str
    #: The settings section model (`<name>:` at the top of the config).
    settings: type[BrokerSettings]
    build_source: Callable[[StreamConfig, GrebeConfig], Source]
    #: A producer onto `topic` for `role` (the output sink; ingest and the API).
    build_producer: Callable[[GrebeConfig, str, ProducerRole], Producer]
    dead_letters: Callable[[GrebeConfig], DeadLetterAccess]
    #: Whether `output.broker` may name it (a queue broker may take input only).
    carries_output: bool = True
    #: `grebe topics`: the declared topics of the config on this broker, with what the
    #: broker has; None where the broker creates topics on first use.
    inspect_topics: Callable[[GrebeConfig], Awaitable[list[TopicRow]]] | None = None
    #: `grebe topics create`: create what is missing; returns what it created.
    create_topics: Callable[[GrebeConfig], Awaitable[list[str]]] | None = None

    def settings_of(self, config: GrebeConfig) -> BrokerSettings:
        """This broker's validated section of `config` (its defaults when absent)."""
        from grebe.brokers.registry import settings_of

        return settings_of(config, self.name)
