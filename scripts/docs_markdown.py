"""Markdown structure for the docs check (scripts/check_docs.py): fenced blocks, prose,
headings and their GitHub anchors, links, tables and inline code spans.

Kept apart from the command checks so each half can be read, and tested, on its own.
Plain line scanning, no Markdown library: the docs use a small, regular subset (ATX
headings, ``` fences, pipe tables), and a problem must point at a line number.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

#: The comment that marks the next fenced block as illustrative: its commands are not
#: checked (documented in docs/testing.md, "The docs check").
ILLUSTRATIVE_MARK = "<!-- illustrative -->"

_FENCE = re.compile(r"^(?P<indent> {0,4})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


@dataclass(frozen=True)
class Problem:
    """One false or unverifiable thing in a doc, at the line a reader would fix."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


@dataclass
class Block:
    """A fenced code block: its info string's first word and its lines with numbers."""

    line: int  # the opening fence
    lang: str
    illustrative: bool
    lines: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class Document:
    """A Markdown file split into prose lines (outside fences) and fenced blocks."""

    path: Path
    name: str  # as shown in problems: relative to the repository root
    prose: list[tuple[int, str]]
    blocks: list[Block]
    unclosed_fence: int | None = None  # line of a fence never closed

    @property
    def anchors(self) -> set[str]:
        return heading_anchors(text for _, text in self.prose)


def parse(path: Path, name: str) -> Document:
    """Split `path` into prose and fenced blocks; note a preceding illustrative mark."""
    prose: list[tuple[int, str]] = []
    blocks: list[Block] = []
    open_block: Block | None = None
    closing = ""
    last_prose = ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = _FENCE.match(line)
        if open_block is not None:
            if match and match["fence"][0] == closing[0] and len(match["fence"]) >= len(
                closing
            ) and not match["info"].strip():
                blocks.append(open_block)
                open_block = None
            else:
                open_block.lines.append((number, line))
            continue
        if match:
            closing = match["fence"]
            info = match["info"].strip()
            open_block = Block(
                line=number, lang=info.split()[0].lower() if info else "",
                illustrative=last_prose.strip() == ILLUSTRATIVE_MARK,
            )
            continue
        prose.append((number, line))
        if line.strip():
            last_prose = line
    return Document(path, name, prose, blocks,
                    unclosed_fence=open_block.line if open_block else None)


def mask_code_spans(text: str) -> str:
    """`text` with every inline code span blanked (same length): a link or a pipe inside
    backticks is literal text, not Markdown."""
    return _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), text)


def code_spans(text: str) -> list[str]:
    """The contents of the inline code spans of one line."""
    return [m.group(2).strip() for m in _CODE_SPAN.finditer(text)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens
    (inline code and emphasis markers are punctuation too)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    kept = []
    for char in text:
        if char in " -_" or unicodedata.category(char)[0] in "LN":
            kept.append("-" if char == " " else char)
    return "".join(kept)


def heading_anchors(lines: object) -> set[str]:
    """Every anchor the headings of these prose lines define, duplicates numbered as
    GitHub numbers them (`name`, `name-1`, ...)."""
    seen: dict[str, int] = {}
    anchors: set[str] = set()
    for text in lines:  # type: ignore[attr-defined]
        match = _HEADING.match(str(text))
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        anchors.add(base if count == 0 else f"{base}-{count}")
    return anchors


def links(doc: Document) -> list[tuple[int, str]]:
    """(line, target) of every inline link and image in the prose."""
    found = []
    for number, text in doc.prose:
        for match in _LINK.finditer(mask_code_spans(text)):
            found.append((number, match.group(1)))
    return found


def _cells(row: str) -> int:
    text = mask_code_spans(row.replace("\\|", "  ")).strip()
    if text.startswith("|"):
        text = text[1:]
    if text.endswith("|"):
        text = text[:-1]
    return text.count("|") + 1


def table_problems(doc: Document) -> list[Problem]:
    """A pipe table has one header row, then one separator row, then data rows with as
    many cells as the header: a second separator makes a second header row (a table
    that renders as two), and a row with more or fewer cells shifts its columns."""
    problems: list[Problem] = []
    rows: list[tuple[int, str]] = []
    for number, text in [*doc.prose, (0, "")]:
        if text.lstrip().startswith("|"):
            rows.append((number, text))
            continue
        if len(rows) >= 2 and _TABLE_SEPARATOR.match(rows[1][1]):
            header = _cells(rows[0][1])
            for index, (row_number, row) in enumerate(rows[2:], 2):
                if _TABLE_SEPARATOR.match(row):
                    problems.append(Problem(doc.name, row_number, (
                        f"table has a second separator row (row {index + 1}): "
                        "a table takes one header row")))
                elif _cells(row) != header:
                    problems.append(Problem(doc.name, row_number, (
                        f"table row has {_cells(row)} cells, its header {header}")))
        rows = []
    return problems
