"""Optional Source capabilities are protocols the built-in sources are checked against,
so callers use isinstance and a new broker sees what it may implement."""

from grebe.brokers.kafka import KafkaSource
from grebe.brokers.local import LocalSource
from grebe.brokers.memory import MemorySource
from grebe.brokers.rabbitmq import RabbitSource
from grebe.core.source import (
    ReportsCommitted,
    ReportsDrained,
    ReportsLag,
    Source,
    can_report_caught_up,
)


def test_built_in_sources_declare_their_capabilities_by_shape() -> None:
    assert issubclass(LocalSource, ReportsCommitted) and issubclass(LocalSource, ReportsLag)
    assert issubclass(KafkaSource, ReportsCommitted) and issubclass(KafkaSource, ReportsLag)
    assert issubclass(RabbitSource, ReportsDrained) and issubclass(RabbitSource, ReportsLag)
    assert not issubclass(RabbitSource, ReportsCommitted)


def test_a_source_without_offsets_or_drain_cannot_report_caught_up() -> None:
    class Bare:
        name, handles_retry = "bare", False

        async def start(self) -> None: ...
        async def stop(self) -> None: ...
        async def poll(self, max_messages: int, timeout: float) -> list: ...  # noqa: ASYNC109
        async def ack(self, message, outcome, *, reason=None, dead_letter=None) -> None: ...

    assert isinstance(Bare(), Source) and not isinstance(Bare(), ReportsLag)
    assert not can_report_caught_up(Bare())
    memory = MemorySource("s")
    assert isinstance(memory, ReportsLag) and can_report_caught_up(memory)


class _OffsetsOnly:
    async def end_offsets(self) -> dict[int, int]:
        return {}


class _Committed(_OffsetsOnly):
    async def wait_committed(self, target: dict[int, int]) -> None:
        return None


def test_capabilities_need_every_method_of_their_protocol() -> None:
    assert isinstance(MemorySource("s"), ReportsLag)
    assert not isinstance(object(), ReportsLag)
    assert not isinstance(_OffsetsOnly(), ReportsCommitted)  # half of it is not enough
    assert isinstance(_Committed(), ReportsCommitted)
    assert not isinstance(_Committed(), ReportsDrained)
