"""core/ is the runtime and nothing else: it imports only the vocabulary (`types`,
`errors`, `constants`), the wire `codec`, itself and third-party libraries. Wiring
(config, brokers, stores, flows, models, media, hydration, tracing) lives in `grebe.app`,
which hands core small settings dataclasses and picklable recipes.

Read from the syntax trees, so an import inside a function (a "lazy" import) or under
`if TYPE_CHECKING:` counts as much as one at the top of a module."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "src" / "grebe" / "core"

#: What core may import from grebe: the vocabulary, the codec and core itself.
ALLOWED = frozenset({"grebe.types", "grebe.errors", "grebe.constants", "grebe.codec"})


def _grebe_imports(tree: ast.AST, module: str) -> list[tuple[int, str]]:
    """(line, imported module) of every grebe import anywhere in `tree`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's package
                package = module.rsplit(".", node.level)[0]
                base = f"{package}.{node.module}" if node.module else package
            else:
                base = node.module or ""
            if base == "grebe":  # `from grebe import constants as C`
                found.extend((node.lineno, f"grebe.{alias.name}") for alias in node.names)
            else:
                found.append((node.lineno, base))
    return sorted((line, name) for line, name in found if name.split(".")[0] == "grebe")


def forbidden_imports(root: Path = CORE) -> list[str]:
    """"core/file.py:line imports grebe.x" for each import above core's layer."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        module = "grebe.core." + ".".join(path.relative_to(root).with_suffix("").parts)
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, name in _grebe_imports(tree, module):
            if name in ALLOWED or name == "grebe.core" or name.startswith("grebe.core."):
                continue
            problems.append(f"core/{path.relative_to(root)}:{line} imports {name}")
    return problems


def test_core_imports_nothing_above_the_vocabulary() -> None:
    assert forbidden_imports() == []


def test_the_check_sees_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    (tmp_path / "fine.py").write_text(
        "from grebe import constants as C\nfrom grebe.core.plan import Plan\n"
        "from . import task\nimport msgspec\n"
    )
    (tmp_path / "leaky.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from grebe.config import GrebeConfig\n"
        "def build():\n    from grebe.brokers.factory import build_source\n"
        "    import grebe.flows.registry\n"
        "from grebe import tracing\n"
        "from ..stores import base\n"
    )
    assert forbidden_imports(tmp_path) == [
        "core/leaky.py:3 imports grebe.config",
        "core/leaky.py:5 imports grebe.brokers.factory",
        "core/leaky.py:6 imports grebe.flows.registry",
        "core/leaky.py:7 imports grebe.tracing",
        "core/leaky.py:8 imports grebe.stores",
    ]
