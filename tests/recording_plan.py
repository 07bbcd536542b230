"""A plans factory for crash tests: the built-in `basic` plan, plus a processing log.

Upserted annotation rows cannot tell how often a post was processed (the primary key is
(post_id, producer, version)), so a crash test cannot see a lost commit or a committed
post processed again from the store alone. This factory adds a first task, `record`,
that appends "start <post id> <pid>" to a log file before the basic tasks run, and a
last one, `recorded`, that appends "done <post id> <pid>" after the annotation is
written. Each line is one `write` on an O_APPEND descriptor, so lines of concurrent
engine processes never interleave and a `kill -9` leaves at most the line being
written incomplete.

Every `slow_every`-th post (by the number in its id "p<n>") sleeps `slow_s` before its
annotation is written, so there are always posts in flight next to finished ones at a
kill: exactly the state in which committing past an unfinished post loses it.

Configuration (`plans` section):

    plans:
      factory: recording_plan:build_bundle
      recording: {log: /path/to/processing.log, slow_every: 25, slow_s: 1.0}

The tests put this directory (tests/) on PYTHONPATH so engine processes can import it.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path
from typing import Any

from grebe import constants as C
from grebe.config import GrebeConfig
from grebe.core.bundle import PlanBundle
from grebe.core.plan import Plan
from grebe.core.task import TaskContext
from grebe.flows import basic

SETTINGS_KEY = "recording"
START = "start"
DONE = "done"


class _Recorder:
    """Appends one line per event to the processing log (opened lazily per process)."""

    def __init__(self, path: Path, slow_every: int, slow_s: float) -> None:
        self.path = path
        self.slow_every = slow_every
        self.slow_s = slow_s
        self._fd: int | None = None

    def write(self, event: str, post_id: str) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(self._fd, f"{event} {post_id} {os.getpid()}\n".encode())

    def is_slow(self, post_id: str) -> bool:
        number = post_id[1:]
        return self.slow_every > 0 and number.isdigit() and int(number) % self.slow_every == 0


def _recorder(ctx: TaskContext) -> _Recorder:
    recorder: _Recorder = ctx.services.recorder
    return recorder


async def record(ctx: TaskContext) -> Any:
    recorder = _recorder(ctx)
    recorder.write(START, ctx.payload.post.id)
    if recorder.is_slow(ctx.payload.post.id):
        await asyncio.sleep(recorder.slow_s)
    return await basic.filter_text(ctx)


async def recorded(ctx: TaskContext) -> None:
    _recorder(ctx).write(DONE, ctx.payload.post.id)


def build_bundle(config: GrebeConfig) -> PlanBundle:
    settings: dict[str, Any] = config.plans.get(SETTINGS_KEY, {})
    bundle = basic.build_bundle(config)
    services = bundle.services
    services.recorder = _Recorder(
        Path(settings["log"]), int(settings.get("slow_every", 0)),
        float(settings.get("slow_s", 0.0)),
    )
    plan = Plan(
        "recording",
        {"filter": record, "stats": basic.text_stats, "sink": basic.sink, "recorded": recorded},
        {"stats": ["filter"], "sink": ["stats"], "recorded": ["sink"]},
        eligibility=C.BASIC_ELIGIBILITY,
        version=basic.VERSION,
    )
    return PlanBundle(plans=[plan], services=services, components=bundle.components)


def read_log(path: Path) -> list[tuple[str, str]]:
    """(event, post id) per complete line; a line cut by a kill is ignored."""
    if not path.exists():
        return []
    events = []
    for line in path.read_bytes().split(b"\n"):
        parts = line.decode(errors="replace").split()
        if len(parts) == 3 and parts[0] in (START, DONE):
            events.append((parts[0], parts[1]))
    return events


def held_in_flight(path: Path, slow_every: int) -> dict[str, int]:
    """{post id: pid} of held (slow) posts started and not finished, by the last pid
    that started each: where a kill now lands mid-flight."""
    if not path.exists():
        return {}
    open_: dict[str, int] = {}
    for line in path.read_bytes().decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) != 3 or not parts[2].isdigit():
            continue
        if parts[0] == START and parts[1][1:].isdigit() and int(parts[1][1:]) % slow_every == 0:
            open_[parts[1]] = int(parts[2])
        elif parts[0] == DONE:
            open_.pop(parts[1], None)
    return open_


def assert_reprocessing_explained_by_kills(
    events: list[tuple[str, str]], kills: list[tuple[int, set[str]]]
) -> int:
    """At-least-once, as the crash tests check it: a post committed at a kill is never
    started again after it, and a post is started more than once only as often as kills
    caught it started and uncommitted. `kills`: (log length, committed post ids) at each
    kill. Returns the number of reprocessings (all explained)."""
    starts = [(i, post) for i, (event, post) in enumerate(events) if event == START]
    allowed = Counter({post: 1 for _, post in starts})
    for number, (log_end, committed) in enumerate(kills):
        again = sorted({post for i, post in starts if i >= log_end and post in committed})
        assert not again, f"kill {number}: committed posts processed again: {again[:5]}"
        allowed.update({post for i, post in starts if i < log_end} - committed)
    counts = Counter(post for _, post in starts)
    extra = sorted(post for post, n in counts.items() if n > allowed[post])
    assert not extra, f"processed more often than the kills explain: {extra[:5]}"
    return sum(counts.values()) - len(counts)
