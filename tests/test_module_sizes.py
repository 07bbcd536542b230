"""No module in src/ grows past 500 lines: a file that long holds more than one role and
is split along them (docs/architecture.md names the splits)."""

from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "grebe"
MAX_LINES = 500


def test_no_module_is_over_500_lines() -> None:
    sizes = {path.relative_to(SRC).as_posix(): len(path.read_text().splitlines())
             for path in SRC.rglob("*.py")}
    assert len(sizes) > 100  # the walk found the package
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
