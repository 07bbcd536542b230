"""Candidates as columns: one array per attribute instead of one object per candidate.

A home request retrieves ~1,500 candidates and serves 50. Building a `FeedCandidate`
costs 1.2-2 µs (docs/benchmarks.md), and every stage then reads and writes attributes
one candidate at a time; with columns a source builds a handful of arrays, a filter
keeps a boolean mask, a scorer writes an array, and objects are built only for the
rows someone looks at: the served page and the posts filters removed.

A `CandidateFrame` is a view (row positions) of a shared column store. Filters and the
selector return views of the same store, and a column set on a view is written into
the store at the view's rows, so every view, the retrieved one included, reads the
values the later stages gave a row: the same as mutating shared objects, without the
objects. Rows are built by the store's `make_row` from the columns set for that row
(a column a row never got is left out, so the object's default applies), once per row:
the served page and `retrieved` hand out the same objects. A column whose name starts
with an underscore is the components' own (a code, not an attribute): it is never set
on a row's object (`hidden`).

It is a read-only `Sequence` of rows, so code written for lists of candidates (tests,
the CLI, the HTTP answer) keeps working; the pipeline and the home components use the
columns (`column`, `set`, `take`, `split`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from numbers import Number
from typing import Any, Generic, TypeVar, overload

import numpy as np

R = TypeVar("R")


def as_column(values: Sequence[Any] | np.ndarray) -> np.ndarray:
    """An array of `values`, one element (row) per value: arrays as they are (a 2-d
    array is a column of vectors, e.g. the candidates' embeddings as one matrix),
    numbers as a numeric array, anything else (strings, lists, dicts, vectors, None) as
    an object array (np.asarray would turn equal-length lists into a 2-d array)."""
    if isinstance(values, np.ndarray) and values.ndim >= 1:
        return values
    n = len(values)
    if n and isinstance(values[0], Number) and not isinstance(values[0], bool | np.bool_):
        try:
            array = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError):
            array = None
        if array is not None and array.ndim == 1:
            return array
    return np.fromiter(values, dtype=object, count=n)


def as_rows(column: np.ndarray) -> np.ndarray:
    """A column of vectors (2-d) as an object column of its rows; others as they are:
    for joining it with a column of another shape."""
    if column.ndim == 1:
        return column
    return np.fromiter(column, dtype=object, count=len(column))


def cells(column: np.ndarray) -> list[Any]:
    """A column's values as Python values (a vector column's as row arrays)."""
    return column.tolist() if column.ndim == 1 else list(column)


class _Store(Generic[R]):
    """The columns of every retrieved row, which rows have each column, built rows."""

    __slots__ = ("assign", "columns", "has", "make_row", "n", "rows")

    def __init__(self, columns: dict[str, np.ndarray], n: int,
                 make_row: Callable[[dict[str, Any]], R],
                 assign: Callable[[R, str, Any], None]) -> None:
        self.columns = columns
        self.n = n
        self.has: dict[str, np.ndarray] = {}  # column -> rows set (absent: all rows)
        self.make_row = make_row
        self.assign = assign
        self.rows: dict[int, R] = {}

    def row(self, i: int) -> R:
        built = self.rows.get(i)
        return built if built is not None else self.build([i])[0]

    def build(self, positions: list[int]) -> list[R]:
        """The rows at these positions, each built once: the rows not built yet are
        built together, one `tolist` per column (plain Python values) instead of a
        read and a type check per cell."""
        rows = self.rows
        todo = [i for i in dict.fromkeys(positions) if i not in rows]
        if todo:
            at = np.asarray(todo, dtype=np.intp)
            names, values = [], []
            for name, column in self.columns.items():
                if hidden(name):
                    continue
                got = cells(column[at])
                if column.dtype == object:  # scalars stored in an object column
                    got = [c.item() if isinstance(c, np.generic) else c for c in got]
                has = self.has.get(name)
                if has is not None:  # rows without the column: left out, default applies
                    got = [c if h else _UNSET for c, h in zip(got, has[at].tolist(),
                                                             strict=True)]
                names.append(name)
                values.append(got)
            make, partial = self.make_row, bool(self.has)
            for i, row in zip(todo, zip(*values, strict=True), strict=True):
                rows[i] = make({name: c for name, c in zip(names, row, strict=True)
                                if c is not _UNSET} if partial
                               else dict(zip(names, row, strict=True)))
        return [rows[i] for i in positions]


_UNSET = object()  # a cell of a column its row never got


def hidden(name: str) -> bool:
    """Whether a column is the components' own, never an attribute of a row's object."""
    return name.startswith("_")


class CandidateFrame(Sequence[R]):
    """Rows `rows` (None: all, in order) of a column store; see the module docstring."""

    __slots__ = ("_rows", "_store")

    def __init__(self, store: _Store[R], rows: np.ndarray | None = None) -> None:
        self._store = store
        self._rows = rows

    @classmethod
    def from_columns(cls, columns: Mapping[str, Sequence[Any] | np.ndarray],
                     make_row: Callable[[dict[str, Any]], R],
                     assign: Callable[[R, str, Any], None] = setattr) -> CandidateFrame[R]:
        """A frame of these columns; `make_row` builds a row's object from its values,
        `assign` sets one value on a row built already (setattr, or a converting one)."""
        arrays = {name: as_column(values) for name, values in columns.items()}
        lengths = {len(a) for a in arrays.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths {sorted(lengths)}")
        return cls(_Store(arrays, lengths.pop() if lengths else 0, make_row, assign))

    @classmethod
    def concat(cls, frames: Sequence[CandidateFrame[R]]) -> CandidateFrame[R]:
        """One frame of the frames' rows, in order (their columns must be the same)."""
        if len(frames) == 1:
            return frames[0]
        names = list(frames[0].names())
        if any(set(f.names()) != set(names) for f in frames):
            raise ValueError("frames with different columns cannot be joined")
        columns = {name: _joined([f.column(name) for f in frames]) for name in names}
        first = frames[0]._store
        store = _Store(columns, sum(len(f) for f in frames), first.make_row, first.assign)
        for name in names:  # which rows have a column set only on some rows
            if any(name in f._store.has for f in frames):
                store.has[name] = np.concatenate([f._has(name) for f in frames])
        return cls(store)

    def _has(self, name: str) -> np.ndarray:
        """Whether each row of this frame has `name` set."""
        has = self._store.has.get(name)
        if has is None:
            return np.ones(len(self), dtype=bool)
        return has if self._rows is None else has[self._rows]

    def names(self) -> list[str]:
        return list(self._store.columns)

    def __len__(self) -> int:
        return self._store.n if self._rows is None else len(self._rows)

    def positions(self) -> np.ndarray:
        """The store rows this frame holds, in order."""
        return np.arange(self._store.n) if self._rows is None else self._rows

    def column(self, name: str) -> np.ndarray:
        """The values of `name` for this frame's rows (KeyError if never set)."""
        column = self._store.columns[name]
        return column if self._rows is None else column[self._rows]

    def has(self, name: str) -> bool:
        """Whether every row of this frame has `name` set."""
        if name not in self._store.columns:
            return False
        return bool(self._has(name).all())

    def set(self, name: str, values: Sequence[Any] | np.ndarray) -> None:
        """Give this frame's rows these values of `name` (in the shared store)."""
        store = self._store
        array = as_column(values)
        if len(array) != len(self):
            raise ValueError(f"{len(array)} values of {name!r} for {len(self)} rows")
        rows = self._rows
        if rows is None:
            store.columns[name] = array
            store.has.pop(name, None)
        else:
            column = store.columns.get(name)
            if column is not None and column.shape[1:] != array.shape[1:]:
                # Vectors of another length, or vectors and objects: rows of objects.
                array = as_rows(array)
                if column.ndim > 1:
                    column = store.columns[name] = as_rows(column)
            if column is None or (column.dtype != array.dtype and column.dtype != object):
                old = column
                column = np.empty((store.n, *array.shape[1:]), dtype=array.dtype)
                if old is not None:
                    column[:] = old
                if name not in store.has:
                    store.has[name] = np.zeros(store.n, dtype=bool) if old is None else \
                        np.ones(store.n, dtype=bool)
                store.columns[name] = column
            column[rows] = array
            has = store.has.get(name)
            if has is not None:
                has[rows] = True
        if store.rows and not hidden(name):
            # Rows built before see the new values, as shared objects would.
            built = store.rows
            positions = self.positions()
            # Only the built rows (the page, the removed posts: tens) are visited, not
            # every row of the view.
            at = np.flatnonzero(np.isin(positions, np.fromiter(built, dtype=np.intp,
                                                               count=len(built))))
            for i, value in zip(positions[at].tolist(), cells(array[at]), strict=True):
                store.assign(built[i], name, value)

    def take(self, indices: Sequence[int] | np.ndarray) -> CandidateFrame[R]:
        """The rows at these positions of this frame, in that order."""
        index = np.asarray(indices, dtype=np.intp)
        return CandidateFrame(self._store, self.positions()[index])

    def split(self, drop: Sequence[bool] | np.ndarray
              ) -> tuple[CandidateFrame[R], CandidateFrame[R]]:
        """(kept, removed) by a mask, each in this frame's order."""
        mask = np.asarray(drop, dtype=bool)
        if len(mask) != len(self):
            raise ValueError(f"{len(mask)} flags for {len(self)} rows")
        rows = self.positions()
        return (CandidateFrame(self._store, rows[~mask]),
                CandidateFrame(self._store, rows[mask]))

    @overload
    def __getitem__(self, index: int) -> R: ...

    @overload
    def __getitem__(self, index: slice) -> list[R]: ...

    def __getitem__(self, index: int | slice) -> R | list[R]:
        positions = self.positions()
        if isinstance(index, slice):
            return self._store.build(positions[index].tolist())
        return self._store.row(int(positions[index]))

    def __iter__(self) -> Iterator[R]:
        return iter(self._store.build(self.positions().tolist()))


def _joined(columns: list[np.ndarray]) -> np.ndarray:
    """Columns of several frames as one (object rows where their shapes differ)."""
    if len({c.shape[1:] for c in columns}) > 1:
        columns = [as_rows(c) for c in columns]
    return np.concatenate(columns)


def column(candidates: Sequence[Any], name: str) -> np.ndarray | list[Any]:
    """One attribute of every candidate: the frame's column, or read off the objects
    (also for a frame some of whose rows lack the column: their objects' defaults)."""
    if isinstance(candidates, CandidateFrame) and candidates.has(name):
        return candidates.column(name)
    return [getattr(c, name) for c in candidates]


def numbers(candidates: Sequence[Any], name: str) -> np.ndarray:
    """One numeric attribute of every candidate as float64: a frame's numeric column as
    it is (no Python float per row), else read off the objects."""
    values = column(candidates, name)
    if isinstance(values, np.ndarray) and values.dtype != object:
        return values.astype(np.float64, copy=False)
    return np.fromiter(values, dtype=np.float64, count=len(values))
