"""One process's CPU seconds and memory, read from /proc, for the benches that watch the
processes they start (bench/realflows.py, bench/media_watch.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grebe.core.engine_start import process_cpu_s


@dataclass(frozen=True)
class ProcSample:
    cpu_s: float  # user + system
    peak_kb: int  # VmHWM: the process's peak RSS so far
    rss_kb: int  # VmRSS: its RSS now


def sample(pid: int) -> ProcSample | None:
    """None when the process is gone (or not readable) by the time it is read. Its CPU
    time is read as the engine's start watch reads it (grebe.core.engine_start)."""
    cpu_s = process_cpu_s(pid)
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    if cpu_s is None:
        return None
    memory = {key: int(rest.split()[0]) for key, _, rest in
              (line.partition(":") for line in status.splitlines())
              if key in ("VmHWM", "VmRSS")}
    return ProcSample(cpu_s, memory.get("VmHWM", 0), memory.get("VmRSS", 0))
