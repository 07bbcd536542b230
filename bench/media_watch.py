"""Watching a bench's process tree and the media pipeline's temporary directories.

`Watch` samples, every 0.1 s, /proc for the peak and current RSS of every process under
a root (by role: decoding child, spawned Python process, program) and counts the
pipeline's per-item directories; `Timeline` keeps RSS at every tenth of a run's items.
Used by bench/media_volume.py.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import procstat

from grebe.media.video_sandbox import CHILD_MODULE

WORK_PREFIX = "grebe-media-"  # the pipeline's per-item directories (pipeline._download)
TIMELINE_POINTS = 10  # RSS samples over a phase, at every tenth of the items


@dataclass
class Watch:
    """Samples, every 0.1 s: peak and current RSS of a process tree by role, and how many
    per-item directories the pipeline holds under `work` (cleaned as it goes: bounded,
    then 0)."""

    root_pid: int
    work: Path
    root_role: str
    names: dict[int, str] = field(default_factory=dict)
    peak_kb: dict[int, int] = field(default_factory=dict)
    cpu_s: dict[int, float] = field(default_factory=dict)
    peak_dirs: int = 0
    current_kb: dict[int, int] = field(default_factory=dict)  # the last walk's VmRSS
    _walking: dict[int, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _children(self, pid: int) -> list[int]:
        out: list[int] = []
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                out += [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                continue
        return out

    def _sample(self, pid: int, role: str) -> None:
        now = procstat.sample(pid)
        if now is None:
            return
        self.cpu_s[pid] = now.cpu_s
        self.peak_kb[pid] = max(self.peak_kb.get(pid, 0), now.peak_kb)
        self._walking[pid] = now.rss_kb
        self.names.setdefault(pid, role)

    def _walk(self, pid: int, role: str) -> None:
        self._sample(pid, role)
        for child in self._children(pid):
            try:
                cmd = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if not cmd.strip():  # forked, not yet exec'd (or a zombie): its role is unknown
                continue
            self._walk(child, _role(cmd.decode("utf-8", "replace"), role))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._walking = {}
            self._walk(self.root_pid, self.root_role)
            self.current_kb = self._walking  # swapped whole: readers never see half a walk
            self.peak_dirs = max(self.peak_dirs, count_workdirs(self.work))
            self._stop.wait(0.1)

    def now(self) -> dict[str, float]:
        """Current RSS in MB by role (the largest process of each), and `all` summed."""
        current = dict(self.current_kb)
        by_role: dict[str, float] = {"all": sum(current.values()) / 1024}
        for pid, kb in current.items():
            role = self.names.get(pid, "?")
            by_role[role] = max(by_role.get(role, 0.0), kb / 1024)
        return by_role

    def stop(self) -> dict[str, float]:
        """Peak RSS in MB by role (the largest process of each role)."""
        self._stop.set()
        self._thread.join()
        by_role: dict[str, float] = {}
        for pid, kb in self.peak_kb.items():
            role = self.names[pid]
            by_role[role] = max(by_role.get(role, 0.0), kb / 1024)
        return by_role


def _role(cmdline: str, parent: str) -> str:
    """`parent/what`: what = decode (the sandboxed decoding child), process (a spawned
    Python process: an engine under the dispatcher, an ASR worker), or the program."""
    argv = cmdline.split()
    if CHILD_MODULE in argv:
        what = "decode"
    elif "multiprocessing" in cmdline or (argv and "python" in Path(argv[0]).name):
        what = "process"
    else:
        what = Path(argv[0]).name if argv else "?"
    return f"{parent}/{what}"


def count_workdirs(work: Path) -> int:
    try:
        return sum(1 for p in work.iterdir() if p.name.startswith(WORK_PREFIX))
    except OSError:
        return 0


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


@dataclass
class Timeline:
    """RSS by role at every tenth of the videos: a leak shows as growth at a steady
    number of items in flight, where a peak alone cannot tell growth from a spike."""

    every: int
    watch: Watch
    started: float
    points: list[dict] = field(default_factory=list)

    def tick(self, done: int) -> None:
        if done % self.every == 0:
            point = {"done": done, "s": time.monotonic() - self.started,
                     "dirs": count_workdirs(self.watch.work), **self.watch.now()}
            self.points.append(point)
            # Progress on stderr as it goes: a run killed from outside still told something.
            print(f"  {done} done at {point['s']:.0f} s, load {load_average()}, RSS MB all "
                  f"{point['all']:.0f}", file=sys.stderr, flush=True)
