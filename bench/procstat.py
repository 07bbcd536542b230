"""One process's CPU seconds and memory, read from /proc, for the benches that watch the
processes they start (bench/realflows.py, bench/media_watch.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcSample:
    cpu_s: float  # user + system
    peak_kb: int  # VmHWM: the process's peak RSS so far
    rss_kb: int  # VmRSS: its RSS now


def sample(pid: int) -> ProcSample | None:
    """None when the process is gone (or not readable) by the time it is read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    memory = {key: int(rest.split()[0]) for key, _, rest in
              (line.partition(":") for line in status.splitlines())
              if key in ("VmHWM", "VmRSS")}
    return ProcSample((int(fields[11]) + int(fields[12])) / TICK,
                      memory.get("VmHWM", 0), memory.get("VmRSS", 0))
