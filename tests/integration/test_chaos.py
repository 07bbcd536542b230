"""A small, bounded run of scripts/chaos.py: real default flows and settings, faults
that kill engines (also while their replacement loads the models) and the dispatcher
mid-stream, and the script's own checks (nothing lost, nothing dead-lettered for a
system fault, no duplicates) must hold."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "chaos.py"


def test_chaos_rounds_lose_nothing(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "2", "--posts", "15", "--seed", "5",
         "--max-seconds", "500", "--round-timeout", "200", "--workdir", str(tmp_path / "work"),
         "--faults", "kill_engine_loading", "kill_dispatcher"],
        capture_output=True, text=True, timeout=600,
    )
    report = result.stdout + result.stderr[-3000:]
    figures = report.split("== chaos figures ==")[-1]
    assert result.returncode == 0, report
    assert re.search(r"rounds 2, faults [2-4] ", figures), report  # 1 or 2 per round
    # Each stream reading the topic (two in the default config) dead-letters each bad line.
    own = re.search(r"posts 30: annotated 30, dead-lettered for their own fault (\d+) "
                    r"\(2 bad lines x (\d+) streams reading posts\)", figures)
    assert own and int(own[1]) == 2 * int(own[2]) >= 2, report
    assert "lost 0, dead-lettered for a system fault 0, duplicates 0, stuck 0" in figures, report
