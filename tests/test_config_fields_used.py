"""Every configuration field is read somewhere: a field nothing reads is a setting that
silently does nothing (issue 9: `engine.task_timeout_s` was read by nothing while plans
used the constant).

Structured, on the syntax trees of src/ (comments, docstrings and strings do not count):
the fields come from the pydantic models, and a field counts as read only when an
attribute access reads it from its own section: `engine.task_timeout_s`, or through a
name the section object travels under: a variable assigned from `<...>.engine`, or a
parameter/attribute annotated with the section's class (`config: DispatcherConfig`
makes `self._config.max_attempts` a read of the dispatcher section's field)."""

import ast
import typing
from pathlib import Path

from pydantic import BaseModel

from grebe.config import GrebeConfig

SRC = Path(__file__).resolve().parents[1] / "src" / "grebe"


def _sections() -> dict[str, type[BaseModel]]:
    """Top-level field name -> its section model, for the structured sections."""
    sections = {}
    for name, field in GrebeConfig.model_fields.items():
        for candidate in (field.annotation, *typing.get_args(field.annotation)):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                sections[name] = candidate
    return sections


def _last_name(node: ast.expr) -> str | None:
    """`self._config` -> "config", `config.engine` -> "engine", `cfg` -> "cfg"."""
    if isinstance(node, ast.Name):
        return node.id.lstrip("_")
    if isinstance(node, ast.Attribute):
        return node.attr.lstrip("_")
    return None


def _annotation_names(node: ast.expr | None) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} if node else set()


class _Reads(ast.NodeVisitor):
    def __init__(self) -> None:
        self.reads: set[tuple[str, str]] = set()  # (holder name, attribute)
        self.assigned_from: set[tuple[str, str]] = set()  # (variable, attribute it took)
        self.annotated: set[tuple[str, str]] = set()  # (name, class named in annotation)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        holder = _last_name(node.value)
        if holder is not None:
            self.reads.add((holder, node.attr))
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        source = node.value.attr if isinstance(node.value, ast.Attribute) else None
        for target in node.targets:
            name = _last_name(target)
            if source and name:
                self.assigned_from.add((name, source))
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        name = _last_name(node.target)
        for cls in _annotation_names(node.annotation) if name else ():
            self.annotated.add((name, cls))  # type: ignore[arg-type]
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        for cls in _annotation_names(node.annotation):
            self.annotated.add((node.arg.lstrip("_"), cls))
        self.generic_visit(node)


def _scan() -> _Reads:
    reads = _Reads()
    for path in SRC.rglob("*.py"):
        reads.visit(ast.parse(path.read_text(), filename=str(path)))
    return reads


def _carriers(reads: _Reads, section: str, model: type[BaseModel]) -> set[str]:
    names = {section}
    names |= {var for var, source in reads.assigned_from if source == section}
    names |= {name for name, cls in reads.annotated if cls == model.__name__}
    return names


def unread_fields(reads: _Reads | None = None) -> list[str]:
    reads = reads or _scan()
    unread = []
    for section, model in _sections().items():
        carriers = _carriers(reads, section, model)
        for name in model.model_fields:
            if not any((carrier, name) in reads.reads for carrier in carriers):
                unread.append(f"{section}.{name}")
    return unread


def test_every_config_field_is_read_somewhere() -> None:
    assert unread_fields() == []


def test_the_check_catches_a_field_only_mentioned_in_text() -> None:
    reads = _scan()
    reads.reads = {r for r in reads.reads if r[1] != "task_timeout_s"}
    assert unread_fields(reads) == ["engine.task_timeout_s"]
    assert "stream" in _carriers(reads, "streams", _sections()["streams"])
