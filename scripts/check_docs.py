"""Check that README.md and docs/*.md say only true things a machine can verify.

    .venv/bin/python scripts/check_docs.py            # README.md and docs/*.md
    .venv/bin/python scripts/check_docs.py docs/brokers.md

Exit 1 listing every problem as `file:line: what`. Checked (docs/testing.md, "The docs
check", has the rules and how to mark a block illustrative):

- every relative link and image resolves to a file in the repository, and its `#anchor`
  to a heading there;
- every fenced block names its language, so no command hides in an untyped block;
- every command of a shell block (bash, sh, shell, console: the `$ ` lines) is one a
  reader can run: `grebe ...` parses with the CLI's own parser (subcommand, options,
  arguments; nothing runs), scripts named exist, `bench/` scripts accept their options
  (from their `--help`), repository paths exist; anything else must be marked;
- inline code naming a repository file (`core/offsets.py`, `tests/x.py::test_y`) or a
  Python object (`grebe.brokers.kafka.KafkaSource`, `grebe.flows.registry:build_bundle`)
  names one that exists;
- every YAML block loads as grebe configuration (`grebe.config.load_config`);
- pipe tables have one header row and rows of the header's width.

tests/test_docs.py runs it in CI (scripts/test.sh).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import tempfile
import textwrap
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from docs_commands import CommandChecker, tracked_files
from docs_markdown import Block, Document, Problem, code_spans, links, parse, table_problems

ROOT = Path(__file__).resolve().parents[1]
#: Fence languages whose lines are commands.
SHELL_LANGS = frozenset({"bash", "sh", "shell", "console", "zsh"})
#: Fence languages whose blocks are grebe configuration (or a part of one).
CONFIG_LANGS = frozenset({"yaml", "yml"})
#: File endings that make an inline code span a claim about a repository file.
FILE_SUFFIXES = (".py", ".md", ".sh", ".yaml", ".yml", ".json", ".jsonl", ".toml", ".proto",
                 ".npz", ".txt", ".cfg", ".ini", ".html")
#: Characters that make an inline code span a pattern or placeholder, not a path.
PLACEHOLDER_CHARS = set("<>*{}~$ ")
#: Dotted `grebe.` names that are not Python: protobuf packages (`grebe.thunder.v1.X`).
NOT_PYTHON = re.compile(r"\.v\d+(\.|$)")


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def check_files(paths: list[Path], root: Path = ROOT) -> list[Problem]:
    """Every problem in these Markdown files, in file and line order."""
    commands = CommandChecker(root)
    problems: list[Problem] = []
    for path in paths:
        doc = parse(path, str(path.resolve().relative_to(root.resolve())))
        problems += check_document(doc, root, commands)
    return problems


def check_document(doc: Document, root: Path, commands: CommandChecker) -> list[Problem]:
    problems = link_problems(doc, root) + table_problems(doc) + inline_problems(doc, root)
    if doc.unclosed_fence:
        problems.append(Problem(doc.name, doc.unclosed_fence, "fence never closed"))
    for block in doc.blocks:
        if not block.lang:
            problems.append(Problem(doc.name, block.line, (
                "fenced block without a language: say ```bash for commands (checked), "
                "```text for output")))
        elif block.lang in SHELL_LANGS and not block.illustrative:
            problems += commands.check_block(doc.name, block)
        elif block.lang in CONFIG_LANGS and not block.illustrative:
            reason = config_problem(block)
            if reason:
                problems.append(Problem(doc.name, block.line, reason))
    return sorted(problems, key=lambda p: p.line)


def config_problem(block: Block) -> str | None:
    """Why a YAML block is not a configuration grebe loads, or None: it is written to a
    temp file and loaded by `grebe.config.load_config`, the loader `grebe run` uses."""
    import yaml

    from grebe.config import load_config

    text = textwrap.dedent("\n".join(line for _, line in block.lines))
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return f"YAML block does not parse: {exc}"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "grebe.yaml"
        path.write_text(yaml.safe_dump(data))
        try:
            load_config(path)
        except Exception as exc:  # ConfigError, and anything else loading raises
            return (f"YAML block is not a configuration grebe loads: {exc} (mark it "
                    "illustrative if it needs files or secrets a reader supplies)")
    return None


def link_problems(doc: Document, root: Path) -> list[Problem]:
    problems = []
    for line, target in links(doc):
        if ":" in target.split("/")[0] or target.startswith("//"):
            continue  # http:, https:, mailto: — not checked offline
        path_part, _, anchor = target.partition("#")
        target_path = (doc.path.parent / path_part).resolve() if path_part else doc.path
        if not _inside(target_path, root):
            problems.append(Problem(doc.name, line, (
                f"link {target!r} leaves the repository: a reader of the repository "
                "cannot follow it")))
            continue
        if not target_path.exists():
            problems.append(Problem(doc.name, line, f"link {target!r}: no such file"))
            continue
        if anchor and target_path.suffix == ".md":
            anchors = parse(target_path, target_path.name).anchors
            if anchor not in anchors:
                problems.append(Problem(doc.name, line, (
                    f"link {target!r}: no heading with anchor #{anchor} in "
                    f"{target_path.name}")))
    return problems


def inline_problems(doc: Document, root: Path) -> list[Problem]:
    """Inline code that names a repository file or a `grebe.*` object must name one."""
    problems = []
    for line, text in doc.prose:
        for span in code_spans(text):
            if span.startswith("grebe.") or span.startswith("grebe:"):
                reason = python_object_problem(span)
            else:
                reason = path_problem(span, doc.path.parent, root)
            if reason:
                problems.append(Problem(doc.name, line, reason))
    return problems


def path_problem(span: str, doc_dir: Path, root: Path) -> str | None:
    """Why inline code naming a repository file is wrong, or None. A span with a `/` and
    a known file ending is a claim; it may be relative to the doc, the repository or any
    folder in it (`core/offsets.py` is src/grebe/core/offsets.py). Bare file names
    (`grebe.yaml`, `posts.jsonl`) are the reader's own files."""
    path, _, test = span.partition("::")
    if "/" not in path or set(path) & PLACEHOLDER_CHARS or path.startswith(("/", "http")):
        return None
    if not path.endswith(FILE_SUFFIXES):
        return None
    if path.startswith(".."):
        resolved = (doc_dir / path).resolve()
        if not _inside(resolved, root):
            return f"{span!r} is outside the repository"
        candidates = [resolved] if resolved.exists() else []
    else:
        clean = path.removeprefix("./")
        candidates = [root / p for p in tracked_files(root)
                      if p == clean or p.endswith("/" + clean)]
    if not candidates:
        return f"{span!r}: no such file in the repository"
    if test:
        name = test.split("[")[0].split("::")[-1]
        if not any(f"def {name}(" in c.read_text(errors="replace")
                   or f"class {name}" in c.read_text(errors="replace") for c in candidates):
            return f"{span!r}: no test {name} in {path}"
    return None


@cache
def python_object_problem(span: str) -> str | None:
    """Why `grebe.pkg.module.Object[.attr]` (or `module:function`) names nothing, or
    None: the longest importable module prefix, then attributes."""
    name = span.split("(")[0].rstrip(".,")
    module_part, colon, attr_part = name.partition(":")
    parts = module_part.split(".")
    attrs = attr_part.split(".") if colon else []
    if not all(p.isidentifier() for p in parts + attrs) or name.endswith(FILE_SUFFIXES):
        return None
    if NOT_PYTHON.search(name) or importlib.util.find_spec(".".join(parts[:2])) is None:
        return None  # `grebe.post_id` (a span attribute), `grebe.thunder.v1.X` (protobuf)
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        except Exception as exc:  # a module that fails on import is a finding too
            return f"{span!r}: importing {'.'.join(parts[:cut])} failed: {exc!r}"
        for attr in parts[cut:] + attrs:
            if not hasattr(obj, attr):
                return f"{span!r}: {type(obj).__name__} {getattr(obj, '__name__', obj)!s} " \
                       f"has no {attr!r}"
            obj = getattr(obj, attr)
        return None
    return f"{span!r}: no such module"


def _inside(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root.resolve())


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or doc_files()
    problems = check_files(paths)
    for problem in problems:
        print(problem)
    checked = ", ".join(str(p.relative_to(ROOT)) for p in paths)
    print(f"{len(problems)} problem(s) in {checked}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
