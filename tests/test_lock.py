"""uv.lock must list what pyproject.toml asks for.

Why: scripts/install.sh installs with `uv sync --frozen`, which installs the lock as it is
and never re-resolves. A dependency added to pyproject.toml but not locked is silently
missing on a fresh machine (httptools was, for one merge), and only a fresh clone shows it.
"""

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _wanted() -> set[tuple[str, str, str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = {"": project["dependencies"], **project.get("optional-dependencies", {})}
    wanted = set()
    for extra, specs in groups.items():
        for spec in specs:
            req = Requirement(spec)
            wanted.add((canonicalize_name(req.name), str(req.specifier), extra))
    return wanted


def _locked() -> set[tuple[str, str, str]]:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    (grebe,) = [p for p in lock["package"] if p["name"] == "grebe"]
    locked = set()
    for dist in grebe["metadata"]["requires-dist"]:
        marker = dist.get("marker", "")
        extra = marker.split("extra == '")[1].rstrip("'") if "extra ==" in marker else ""
        spec = str(Requirement(f"x{dist.get('specifier', '')}").specifier)
        locked.add((canonicalize_name(dist["name"]), spec, extra))
    return locked


def test_every_dependency_in_pyproject_is_locked() -> None:
    missing = _wanted() - _locked()
    assert not missing, f"run `uv lock`: pyproject.toml asks for {sorted(missing)} not in uv.lock"


def test_the_lock_holds_nothing_pyproject_dropped() -> None:
    stale = _locked() - _wanted()
    assert not stale, f"run `uv lock`: uv.lock still requires {sorted(stale)}"
