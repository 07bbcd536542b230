"""grebe.core.peers: typed channels between engines; an unreadable observation is
dropped with a log line, never raised into the engine."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from grebe.core.peers import Peers

Observation = tuple[int, float, str, str]


def wired() -> tuple[Peers, Peers, list[Observation], list[Observation]]:
    first, second = Peers(), Peers()
    got_first: list[Observation] = []
    got_second: list[Observation] = []
    publish = first.channel("c", got_first.append, Observation)
    second.channel("c", got_second.append, Observation)
    first.attach(second.deliver)
    publish((7, 1.5, "author", "post"))
    return first, second, got_first, got_second


def test_an_observation_reaches_the_other_side_as_its_kind() -> None:
    _, _, got_first, got_second = wired()
    assert got_second == [(7, 1.5, "author", "post")] and got_first == []


def test_nothing_is_sent_before_a_peer_is_attached() -> None:
    alone = Peers()
    publish = alone.channel("c", lambda _: None, Observation)
    publish((1, 0.0, "a", "p"))  # one engine: nobody to send to, nothing packed
    sent: list[tuple[str, bytes]] = []
    alone.attach(lambda name, data: sent.append((name, data)))
    publish((2, 0.0, "a", "p"))
    assert [name for name, _ in sent] == ["c"]  # only the one published once attached


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_unreadable_bytes_are_dropped_not_raised(data: bytes) -> None:
    _, second, _, got_second = wired()
    second.deliver("c", data)  # must not raise
    second.deliver("no-such-channel", data)
    assert len(got_second) <= 2
    assert all(isinstance(o, tuple) and len(o) == 4 for o in got_second)
