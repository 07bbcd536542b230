"""Two engine processes (the default on two cores, `engine.processes: auto`) give the
answers one engine gives: an author's memory stays whole (posts routed by author), a
campaign whose accounts land on both engines is still seen (the coordination index is
shared through the dispatcher), and a plan's `max_qps` on `memory://` holds for the two
together. Each test runs the real spam flow in real engine processes, once with one
engine and once with two, and compares."""

from __future__ import annotations

import asyncio
import zlib
from pathlib import Path

import pytest

from grebe import constants as C
from grebe.app.engines import process_executor
from grebe.config import GrebeConfig, load_config
from grebe.flows import spam
from grebe.types import Post, TaskPayload, TaskResult, TaskStatus

pytestmark = pytest.mark.slow  # engine processes load the flows

SPAM = frozenset({spam.NAME})


def _config(tmp_path: Path, processes: int, **spam_settings: object) -> GrebeConfig:
    return load_config(
        data_dir=tmp_path / f"var{processes}", engine={"processes": processes},
        metrics={"enabled": False}, output={"broker": "none"}, store={"backend": "memory"},
        # The real spam flow; its models cheap test doubles (the signals are not models).
        inference={"embedder": {"backend": "hash"}, "language_id": False,
                   "nsfw": {"backend": "none"}, "ocr": {"backend": "none"},
                   "transcriber": {"backend": "none"}},
        plans={"factory": C.FLOWS_PLANS_FACTORY, "enabled": [spam.NAME], "heads": False,
               "defaults": {"dedupe_ttl_s": 0}, spam.NAME: spam_settings},
    )


def _engine_of(author: str) -> int:
    """The engine of two that grebe.core.engine routes this author's posts to."""
    return zlib.crc32(author.encode()) % 2


def _authors(count: int) -> list[str]:
    """`count` authors alternating between the two engines (0, 1, 0, 1, ...)."""
    found: dict[int, list[str]] = {0: [], 1: []}
    i = 0
    while min(len(v) for v in found.values()) < count:
        author = f"acct{i}"
        found[_engine_of(author)].append(author)
        i += 1
    return [found[n % 2][n // 2] for n in range(count)]


def _post(post_id: str, author: str, text: str) -> TaskPayload:
    return TaskPayload(payload_id=post_id, post=Post(id=post_id, author_id=author, text=text),
                       eligibilities=SPAM)


async def _run(config: GrebeConfig, batches: list[list[TaskPayload]]) -> list[TaskResult]:
    """Each batch submitted at once, the next after it has finished."""
    executor = process_executor(config)
    await executor.start()
    try:
        results: list[TaskResult] = []
        for batch in batches:
            results += await asyncio.gather(*(executor.submit(p) for p in batch))
        return results
    finally:
        await executor.stop()


def _answers(results: list[TaskResult]) -> list[tuple[list[str], dict, dict]]:
    return [(r.labels, r.scores, r.reasons) for r in results]


async def test_a_campaign_over_both_engines_is_detected_as_with_one(tmp_path: Path) -> None:
    authors = _authors(6)
    assert {_engine_of(a) for a in authors} == {0, 1}
    campaign = [[_post(f"c{i}", author,
                       f"Claim your FREE crypto airdrop today, limited spots http://t.co/{i}")]
                for i, author in enumerate(authors)]
    one = await _run(_config(tmp_path, 1), campaign)
    two = await _run(_config(tmp_path, 2), campaign)
    flagged = [spam.LABEL_COORDINATED in r.labels for r in two]
    assert flagged == [False] * 4 + [True] * 2  # min_accounts 5: the fifth and sixth
    assert two[-1].scores[spam.LABEL_COORDINATED] == 6.0
    assert _answers(two) == _answers(one)


async def test_an_authors_repeats_are_counted_whole_over_two_engines(tmp_path: Path) -> None:
    """Three copies by one author and posts by others, all submitted at once: with two
    engines the author's copies meet in one engine's memory, as with one engine."""
    others = _authors(6)
    text = "same promo again, see http://x.co/deal for the deal"
    burst = [_post(f"r{i}", "repeater", text) for i in range(3)]
    burst += [_post(f"o{i}", author, f"an ordinary post number {i}")
              for i, author in enumerate(others)]
    one = await _run(_config(tmp_path, 1), [burst])
    two = await _run(_config(tmp_path, 2), [burst])
    copies = sorted(r.reasons["spam"] for r in two[:3])
    assert copies == sorted(r.reasons["spam"] for r in one[:3])
    assert sum("same text posted 2 time(s)" in reason for reason in copies) == 1
    assert sum("same text posted 1 time(s)" in reason for reason in copies) == 1


async def test_a_plans_max_qps_holds_across_two_engines(tmp_path: Path) -> None:
    """`max_qps` on memory:// is the plan's budget, not each engine's: 20 posts at once
    with a budget of 4 a second and no waiting, and 4 run, with one engine or two."""
    burst = [_post(f"q{i}", author, f"hello there friend number {i}")
             for i, author in enumerate(_authors(20))]
    limits = {"max_qps": 4, "rate_limit_max_wait_s": 0}
    for processes in (1, 2):
        results = await _run(_config(tmp_path, processes, **limits), [burst])
        ran = [r.plans[spam.NAME] for r in results].count(TaskStatus.SUCCESS)
        assert ran == 4, f"{processes} engine(s) ran {ran} of 20 posts at 4 per second"
