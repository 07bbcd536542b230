"""Every configuration field is read somewhere: a field nothing reads is a setting that
silently does nothing (issue 9: `engine.task_timeout_s` was read by nothing while plans
used the constant).

Structured, on the syntax trees of src/ (comments, docstrings and strings do not count):
the fields come from the pydantic models, and a field counts as read only when an
attribute access reads it from its own section: `engine.task_timeout_s`, or through a
name the section object travels under: a variable assigned from `<...>.engine`, or a
parameter/attribute annotated with the section's class (`config: DispatcherConfig`
makes `self._config.max_attempts` a read of the dispatcher section's field), or a name
assigned from one of those (`self.settings = s = settings or ThunderSettings()` makes
`s` carry the thunder section).

Nested sections are checked the same way, field by field: `inference.embedder.dim`
must be read from something carrying the embedder section, `media.fetch.max_bytes`
from something carrying the fetch section."""

import ast
import typing
from pathlib import Path

from pydantic import BaseModel

from grebe.config import GrebeConfig
from grebe.feed.scorers import SIGNALS

SRC = Path(__file__).resolve().parents[1] / "src" / "grebe"

#: Sections whose fields are read by name (getattr over a tuple), not as attributes:
#: section -> that tuple, which must name exactly the section's fields.
READ_BY_NAME: dict[str, tuple[str, ...]] = {"feed.weights": SIGNALS}


def _submodel(annotation: object) -> type[BaseModel] | None:
    """The section model a field holds (`X`, `X | None`, `list[X]`, `dict[str, X]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        if (inner := _submodel(arg)) is not None:
            return inner
    return None


def _sections(model: type[BaseModel] = GrebeConfig,
              prefix: str = "") -> dict[str, type[BaseModel]]:
    """Dotted field path -> its section model, for every structured section at any
    depth (`inference`, `inference.embedder`, `feed.weights`...)."""
    sections = {}
    for name, field in model.model_fields.items():
        sub = _submodel(field.annotation)
        if sub is not None:
            sections[prefix + name] = sub
            sections |= _sections(sub, f"{prefix}{name}.")
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


def _value_names(node: ast.expr) -> set[str]:
    """The names an assigned value may come from: `config.engine` -> engine,
    `settings or ThunderSettings()` -> settings, `a if c else b` -> a, b; and for a
    container, its elements: `[first, *cfg.fallbacks]` -> first, fallbacks,
    `topics.items()`, `topics.get(name)`, `topics[name]` -> topics,
    `{k.id: k for k in keys}` -> k."""
    if isinstance(node, ast.BoolOp):
        return set().union(*(_value_names(v) for v in node.values))
    if isinstance(node, ast.IfExp):
        return _value_names(node.body) | _value_names(node.orelse)
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return set().union(set(), *(_value_names(e) for e in node.elts))
    if isinstance(node, ast.Starred):
        return _value_names(node.value)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("items", "values", "get")):
        return _value_names(node.func.value)
    if isinstance(node, ast.Subscript):
        return _value_names(node.value)
    if isinstance(node, ast.DictComp):
        return _value_names(node.value)
    if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp):
        return _value_names(node.elt)
    name = _last_name(node)
    return {name} if name else set()


class _Reads(ast.NodeVisitor):
    def __init__(self) -> None:
        self.reads: set[tuple[str, str]] = set()  # (holder name, attribute)
        self.assigned_from: set[tuple[str, str]] = set()  # (variable, attribute it took)
        self.annotated: set[tuple[str, str]] = set()  # (name, class named in annotation)
        self._classes: list[str] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._classes.append(node.name)
        self.generic_visit(node)
        self._classes.pop()

    def visit_Attribute(self, node: ast.Attribute) -> None:
        holder = _last_name(node.value)
        if holder == "self" and self._classes:
            holder = self._classes[-1]  # a section's own method reads its own field
        if holder is not None:
            self.reads.add((holder, node.attr))
        self.generic_visit(node)

    def _bind(self, target: ast.expr, value: ast.expr) -> None:
        targets = target.elts if isinstance(target, ast.Tuple) else [target]
        for name in filter(None, map(_last_name, targets)):
            for source in _value_names(value):
                self.assigned_from.add((name, source))

    def visit_For(self, node: ast.For) -> None:
        self._bind(node.target, node.iter)
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self._bind(node.target, node.iter)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        sources = _value_names(node.value)
        for target in node.targets:
            name = _last_name(target)
            for source in sources if name else ():
                self.assigned_from.add((name, source))  # type: ignore[arg-type]
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
    """Names the section travels under: its own field name, names annotated with its
    class, and (to a fixed point) names assigned from any of those."""
    names = {section.rsplit(".", 1)[-1], model.__name__}
    names |= {name for name, cls in reads.annotated if cls == model.__name__}
    while True:
        more = {var for var, source in reads.assigned_from if source in names} - names
        if not more:
            return names
        names |= more


def unread_fields(reads: _Reads | None = None) -> list[str]:
    reads = reads or _scan()
    unread = []
    for section, model in _sections().items():
        if section in READ_BY_NAME:
            continue
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


def test_sections_read_by_name_name_every_field() -> None:
    sections = _sections()
    for section, names in READ_BY_NAME.items():
        assert sorted(names) == sorted(sections[section].model_fields), section


def test_nested_sections_are_checked_too() -> None:
    reads = _scan()
    reads.reads = {r for r in reads.reads if r[1] != "max_redirects"}
    assert unread_fields(reads) == ["media.fetch.max_redirects"]
