"""The Grafana dashboard only queries metrics grebe exports.

A renamed or removed metric leaves a dashboard panel silently empty; this test reads every
PromQL expression in deploy/grafana/grebe.json and checks each metric it names is defined
in src/grebe (the names prometheus_client exports: counters gain `_total`, histograms
`_bucket`, `_sum` and `_count`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "grebe.json"
_NAME = re.compile(r"\bgrebe_[a-z0-9_]+")
_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


def defined_metrics() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "src" / "grebe").rglob("*.py"):
        names.update(re.findall(r"[\"'](grebe_[a-z0-9_]+)[\"']", path.read_text()))
    return names


def exported(name: str, defined: set[str]) -> bool:
    candidates = {name}
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            candidates.add(name[: -len(suffix)])
    return bool(candidates & defined)


def expressions() -> list[tuple[str, str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(panel["title"], target["expr"])
            for panel in panels for target in panel.get("targets", [])]


def test_every_query_names_a_metric_the_code_exports():
    defined = defined_metrics()
    unknown = [(title, name) for title, expr in expressions()
               for name in _NAME.findall(expr) if not exported(name, defined)]
    assert unknown == []


def test_the_dashboard_covers_each_subsystem_and_every_panel_queries():
    exprs = expressions()
    assert all(expr.strip() for _, expr in exprs)
    used = {name for _, expr in exprs for name in _NAME.findall(expr)}
    for subsystem in ("dispatcher", "plan", "inference", "media", "api", "thunder"):
        assert any(f"grebe_{subsystem}" in name for name in used), subsystem


def test_a_misspelt_metric_would_be_caught():
    assert not exported("grebe_dispatcher_recieved_total", defined_metrics())
    assert exported("grebe_dispatcher_received_total", defined_metrics())
