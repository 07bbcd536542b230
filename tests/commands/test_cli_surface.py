"""The command line's shape: every command the docs show exists, the CLI and the command
logic sit above the product (nothing in it imports them), the command modules import
one another without a cycle, and no file of theirs passes the size limit."""

from __future__ import annotations

import ast
import graphlib
import re
from pathlib import Path

import typer
from typer.core import TyperGroup

from grebe.cli import app

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "grebe"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND_PACKAGES = ("grebe.cli", "grebe.commands")
MAX_LINES = 500
# Code in the docs: fenced blocks and inline spans. A command starts a line of a block
# (after a prompt, env assignments or a venv path) or starts an inline span.
FENCED = re.compile(r"```.*?```", re.S)
INLINE = re.compile(r"`([^`\n]+)`")
LINE_START = re.compile(r"^\s*(?:\$ )?(?:[A-Z_]+=\S+ )*(?:\S*/)?grebe ", re.M)
COMMAND = re.compile(r"grebe ([a-z][a-z0-9-]*)(?: ([a-z][a-z0-9-]*))?")
#: benchmarks.md names two bench loops "grebe no-op" and "grebe relay": labels, not commands.
NOT_COMMANDS = frozenset({"no-op", "relay"})


def documented_commands() -> set[tuple[str, str | None, str]]:
    """(command, next word or None, file) for every `grebe ...` shown as code."""
    found = set()
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        snippets = [block[m.end() - len("grebe "):]
                    for block in FENCED.findall(text) for m in LINE_START.finditer(block)]
        snippets += [span for span in INLINE.findall(FENCED.sub("", text))
                     if span.startswith("grebe ")]
        for snippet in snippets:
            match = COMMAND.match(snippet)
            if match and match.group(1) not in NOT_COMMANDS:
                found.add((match.group(1), match.group(2), doc.name))
    return found


def test_every_documented_command_exists() -> None:
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    shown = documented_commands()
    assert {name for name, _, _ in shown} >= {"run", "serve", "ingest", "demo", "eval"}
    missing = []
    for name, then, doc in sorted(shown, key=str):
        command = root.commands.get(name)
        if command is None:
            missing.append(f"{doc}: grebe {name}")
        elif isinstance(command, TyperGroup) and then and then not in command.commands:
            missing.append(f"{doc}: grebe {name} {then}")
    assert not missing


def _imports(path: Path) -> set[str]:
    """Every grebe module `path` imports, at the top or inside a function (lazy)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {n for n in names if n.startswith("grebe")}


def _module(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_nothing_in_the_product_imports_the_cli_or_the_commands() -> None:
    offenders = sorted(
        f"{_module(path)} imports {name}"
        for path in SRC.rglob("*.py")
        if not _module(path).startswith(COMMAND_PACKAGES)
        for name in _imports(path) if name.startswith(COMMAND_PACKAGES)
    )
    assert not offenders


def test_the_command_modules_import_each_other_without_a_cycle() -> None:
    modules = {_module(p): p for package in ("cli", "commands")
               for p in (SRC / package).glob("*.py")}
    graph = {name: {m for m in _imports(path) if m in modules and m != name}
             for name, path in modules.items()}
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError naming the cycle


def test_no_command_file_is_over_the_size_limit() -> None:
    sizes = {str(p.relative_to(SRC)): len(p.read_text(encoding="utf-8").splitlines())
             for package in ("cli", "commands") for p in (SRC / package).glob("*.py")}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
