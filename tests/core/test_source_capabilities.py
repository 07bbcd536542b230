"""Optional source capabilities are protocols checked with isinstance: a source has one
only when it has every method of it (the dispatcher's lag gauge, `--exit-when-done`)."""

from grebe.brokers.memory import MemorySource
from grebe.core.source import ReportsCommitted, ReportsDrained, ReportsLag


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
