"""The command half of the docs check (scripts/check_docs.py): is each command in a
shell block one a reader can run?

`grebe ...` is parsed by the CLI's own click parser (`make_context`, never invoked), so a
renamed command or option fails here the day it changes. Scripts must exist; a `bench/`
script must accept the options the doc gives it (read from its `--help`). Paths into
the repository must exist. A program the checker does not know is a problem: run it in
a test, or mark its block illustrative.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import re
import shlex
import subprocess
import sys
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docs_markdown import Block

from docs_markdown import Problem

#: The names a doc may call the CLI by.
GREBE = frozenset({"grebe", ".venv/bin/grebe"})
PYTHON = frozenset({"python", "python3", ".venv/bin/python", ".venv/bin/python3"})
#: Prefixes that run the command after them (their own flags dropped).
WRAPPERS = {"time": {"-v", "-p"}, "/usr/bin/time": {"-v", "-p"}, "sudo": set(), "exec": set()}
#: Shell operators that separate simple commands; redirections drop their target.
SEPARATORS = frozenset({"&&", "||", ";", "|", "&"})
REDIRECTS = frozenset({">", ">>", "<", "2>", "2>&1", ">&"})
HELP_TIMEOUT_S = 60
#: `<post id>` in a command: shell reads it as redirections, never as a value.
ANGLE_PLACEHOLDER = re.compile(r"(?<![<>&\d])<[A-Za-z][^<>]*>")


def tracked_files(root: Path) -> list[str]:
    """Repository files (tracked or new, not ignored), as POSIX paths from `root`."""
    return list(_tracked(root.resolve()))


@cache
def _tracked(root: Path) -> tuple[str, ...]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root, capture_output=True, check=True,
        ).stdout.decode()
        return tuple(p for p in out.split("\0") if p and (root / p).exists())
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (unit tests)
        return tuple(p.relative_to(root).as_posix() for p in root.rglob("*")
                     if p.is_file() and ".venv" not in p.parts and ".git" not in p.parts)


def grebe_command() -> Any:
    """The installed `grebe` entry point's command (typer builds a click-style command
    afresh on each call), with path arguments' existence checks off: a doc's
    `posts.jsonl` is the reader's file (repository paths are checked separately)."""
    (entry,) = entry_points(group="console_scripts", name="grebe")
    module = importlib.import_module(entry.module)
    import typer.main

    command = typer.main.get_command(module.app)
    _no_exists(command)
    return command


def _no_exists(command: Any) -> None:
    for param in command.params:
        # typer >= 0.29 vendors click: the path rules sit on the parameter's info.
        info = getattr(getattr(param, "type_descriptor", None), "parameter_info", None)
        for holder in (info, getattr(param, "type", None)):
            if getattr(holder, "exists", False):
                holder.exists = False  # type: ignore[union-attr]
    for sub in getattr(command, "commands", {}).values():
        _no_exists(sub)


def parse_grebe(command: Any, args: list[str]) -> str | None:
    """Why `grebe <args>` would be refused by its parser, or None. Walks the groups the
    way click does (`make_context` level by level, `resilient_parsing` off), so options,
    arguments and their types are checked; no command is invoked."""
    import typer

    shown = f"grebe {' '.join(args)}"
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            ctx = command.make_context("grebe", list(args), resilient_parsing=False)
            current = command
            while hasattr(current, "resolve_command"):  # a group: find the subcommand
                rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
                if not rest:
                    return f"{shown}: needs a subcommand of {ctx.command_path}"
                name, sub, rest = current.resolve_command(ctx, rest)
                if sub is None:
                    return f"{shown}: no command {name!r}"
                ctx = sub.make_context(name, rest, parent=ctx, resilient_parsing=False)
                current = sub
    except typer.Exit as exc:  # --help, --version
        return None if exc.exit_code == 0 else f"{shown}: exits {exc.exit_code}"
    except Exception as exc:  # the parser's usage errors (typer vendors click)
        if not hasattr(exc, "format_message"):
            raise
        return f"{shown}: {exc.format_message()}"
    return None


def split_commands(text: str) -> list[list[str]]:
    """Simple commands of one logical shell line: comments dropped, split on `&&`, `|`,
    `;`, redirections removed. Raises ValueError for unbalanced quotes."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    skip_next = False
    for token in lexer:
        if skip_next:
            skip_next = False
        elif token in SEPARATORS:
            commands.append([])
        elif token in REDIRECTS:
            skip_next = True
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def logical_lines(block: Block) -> list[tuple[int, str]]:
    """The block's commands, continuation lines joined; in a console block only the
    lines after a `$ ` prompt are commands (the rest is output)."""
    joined: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in block.lines:
        line = raw.strip()
        if pending is None:
            if block.lang == "console" and not line.startswith("$ "):
                continue
            line = line.removeprefix("$ ")
            if not line:
                continue
            pending = (number, "")
        pending = (pending[0], pending[1] + " " + line.removesuffix("\\"))
        if not line.endswith("\\"):
            joined.append(pending)
            pending = None
    if pending:
        joined.append(pending)
    return joined


class CommandChecker:
    """Checks shell blocks against one repository (`root`) and the installed CLI."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._grebe: Any = None

    def check_block(self, doc: str, block: Block) -> list[Problem]:
        problems = []
        for number, line in logical_lines(block):
            placeholder = ANGLE_PLACEHOLDER.search(line.split(" #")[0])
            if placeholder:
                problems.append(Problem(doc, number, (
                    f"{placeholder.group(0)!r} is a shell redirection, not a placeholder: "
                    "write a value a reader can paste (POST_ID, or the real one)")))
                continue
            try:
                commands = split_commands(line)
            except ValueError as exc:
                problems.append(Problem(doc, number, f"cannot parse {line.strip()!r}: {exc}"))
                continue
            for argv in commands:
                reason = self.check_command(argv)
                if reason:
                    problems.append(Problem(doc, number, reason))
        return problems

    def check_command(self, argv: list[str]) -> str | None:
        while argv and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0]):
            argv = argv[1:]  # FOO=bar before the program
        while argv and argv[0] in WRAPPERS:
            flags = WRAPPERS[argv[0]]
            argv = argv[1:]
            while argv and argv[0] in flags:
                argv = argv[1:]
        if not argv:
            return None
        program, args = argv[0], argv[1:]
        path_reason = self.repo_paths_problem(args)
        if program in GREBE:
            return parse_grebe(self.grebe, args) or path_reason
        if program in {"bash", "sh"} and args and not args[0].startswith("-"):
            return self.script_problem(args[0], args[1:]) or path_reason
        if program in PYTHON:
            return self.python_problem(args) or path_reason
        if "/" in program and not program.startswith((".venv/", "/", "~")):
            return self.script_problem(program, args) or path_reason
        return (f"{' '.join(argv)!r}: {program!r} is not a command the docs check knows; "
                "mark the block illustrative (docs/testing.md) or run it in a test")

    def python_problem(self, args: list[str]) -> str | None:
        if not args:
            return "python with no script"
        if args[0] == "-m":
            module = args[1] if len(args) > 1 else ""
            if importlib.util.find_spec(module.split(".")[0]) is None:
                return f"python -m {module}: no such module"
            return None
        return self.script_problem(args[0], args[1:])

    def script_problem(self, script: str, args: list[str]) -> str | None:
        path = self.root / script.removeprefix("./")
        if not path.is_file():
            return f"{script}: no such script in the repository"
        if script.removeprefix("./").startswith("bench/") and script.endswith(".py"):
            return self.bench_options_problem(script, args)
        return None

    def bench_options_problem(self, script: str, args: list[str]) -> str | None:
        """A bench script must answer `--help` and know every `--option` the doc uses."""
        code, text = self._help(script.removeprefix("./"))
        if code != 0:
            return f"{script} --help exits {code}: {text.strip().splitlines()[-1:]}"
        known = set(re.findall(r"--[A-Za-z0-9][\w-]*", text))
        unknown = [a.split("=")[0] for a in args
                   if a.startswith("--") and a.split("=")[0] not in known]
        return f"{script}: no option {', '.join(unknown)} in its --help" if unknown else None

    @cache  # noqa: B019 - one checker per run, a few scripts
    def _help(self, script: str) -> tuple[int, str]:
        try:
            done = subprocess.run([sys.executable, script, "--help"], cwd=self.root,
                                  capture_output=True, text=True, timeout=HELP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return 124, f"no answer within {HELP_TIMEOUT_S} s"
        return done.returncode, done.stdout + done.stderr

    def repo_paths_problem(self, args: list[str]) -> str | None:
        """Arguments that start with a top-level folder of the repository must exist."""
        tops = {p.split("/")[0] for p in tracked_files(self.root) if "/" in p}
        for arg in args:
            value = arg.split("=", 1)[-1] if arg.startswith("--") else arg
            clean = value.removeprefix("./")
            named = "/" in clean and clean.split("/")[0] in tops
            if named and not set(clean) & set("<>*{}") and not (self.root / clean).exists():
                return f"{value}: no such path in the repository"
        return None

    @property
    def grebe(self) -> Any:
        if self._grebe is None:
            self._grebe = grebe_command()
        return self._grebe
