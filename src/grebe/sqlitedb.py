"""SQLite off the event loop: one connection confined to one thread, and group commit.

Both the local broker and the SQLite store need the same two things. A sqlite3
connection may only be used by the thread that made it and every call blocks, so each
`SqliteDB` owns a single-thread executor and runs whole batches there. `GroupWriter`
turns many concurrent small writes (one per finished post) into one transaction per
flush: callers await their own item, the writer commits whatever queued up meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

import stamina

from grebe import constants as C

T = TypeVar("T")
R = TypeVar("R")


def connect(
    path: Path, *, synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
    busy_timeout_s: float = C.DEFAULT_SQLITE_BUSY_TIMEOUT_S,
    new_file_pragmas: Sequence[str] = (),
) -> sqlite3.Connection:
    """A connection in WAL mode: readers never block the writer, and a committed
    transaction is in the WAL file before commit returns, so killing the process at any
    moment loses nothing committed and never corrupts the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(
        path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
    )
    if new_file_pragmas and conn.execute("PRAGMA page_count").fetchone()[0] == 0:
        # Page size and auto-vacuum hold only if set before the file's first page is
        # written *and* before it turns WAL: after `journal_mode=WAL` they are ignored.
        for pragma in new_file_pragmas:
            conn.execute(f"PRAGMA {pragma}")
    _ensure_wal(conn, busy_timeout_s)
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA temp_store=MEMORY")
    return conn


def _is_locked(exc: Exception) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


def _ensure_wal(conn: sqlite3.Connection, busy_timeout_s: float) -> None:
    """Switch the file to WAL once. The mode persists in the file, so later openers only
    read it. Switching can fail with "database is locked" *without* waiting on the busy
    handler when another process opens the same new file at the same moment (two engines
    starting together), so the switch is retried for up to the busy timeout."""
    if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
        return
    for attempt in stamina.retry_context(
        on=_is_locked, attempts=None, timeout=busy_timeout_s, wait_initial=0.01, wait_max=0.2
    ):
        with attempt:
            conn.execute("PRAGMA journal_mode=WAL")


@contextlib.contextmanager
def write_txn(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction that rolls back on any error. IMMEDIATE takes the write lock
    up front, so what it reads (e.g. a log's next offsets) cannot be changed by another
    process's write before it writes."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class SqliteDB:
    """A connection confined to its own thread; `run(fn, ...)` calls fn(conn, ...) there."""

    def __init__(
        self, path: Path, *, synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        name: str = "sqlite", new_file_pragmas: Sequence[str] = (),
    ) -> None:
        self.path = Path(path)
        self._synchronous = synchronous
        self._new_file_pragmas = tuple(new_file_pragmas)  # applied when it creates the file
        self._name = name
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None

    async def open(self, init: Callable[[sqlite3.Connection], None] | None = None) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)

        def _open() -> None:
            self._conn = connect(self.path, synchronous=self._synchronous,
                                 new_file_pragmas=self._new_file_pragmas)
            if init is not None:
                init(self._conn)

        await asyncio.get_running_loop().run_in_executor(self._executor, _open)

    async def run(self, fn: Callable[..., R], *args: Any) -> R:
        if self._executor is None or self._conn is None:
            raise RuntimeError(f"{self._name}: database {self.path} is not open")
        conn = self._conn
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, lambda: fn(conn, *args)
        )

    async def close(self) -> None:
        if self._executor is None:
            return
        executor, self._executor = self._executor, None
        conn, self._conn = self._conn, None
        if conn is not None:
            await asyncio.get_running_loop().run_in_executor(executor, conn.close)
        executor.shutdown(wait=True)


class GroupWriter(Generic[T]):
    """Group commit: `submit(items)` returns when a flush containing them has committed.

    At most one flush runs at a time; items submitted while it runs go into the next
    one, so the batch size grows with the load by itself and an idle writer costs
    nothing (no timer). A failed flush fails exactly the callers whose items it held.
    A flush may also refuse single items: it returns {item index: error}, and only the
    callers of those items see their error (the store's post-id check needs that)."""

    def __init__(
        self, flush: Callable[[list[T]], Awaitable[dict[int, Exception] | None]]
    ) -> None:
        self._flush = flush
        self._items: list[T] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._spans: list[tuple[int, int]] = []  # each waiter's items: [start, end)
        self._task: asyncio.Task[None] | None = None

    async def submit(self, items: Sequence[T]) -> None:
        if not items:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        start = len(self._items)
        self._items.extend(items)
        self._waiters.append(future)
        self._spans.append((start, len(self._items)))
        if self._task is None:
            self._task = asyncio.create_task(self._drain())
        await future

    async def _drain(self) -> None:
        waiters: list[asyncio.Future[None]] = []
        try:
            while self._items:
                items, self._items = self._items, []
                waiters, self._waiters = self._waiters, []
                spans, self._spans = self._spans, []
                try:
                    refused = await self._flush(items)
                except Exception as exc:  # the callers see it; keep serving the others
                    _settle(waiters, exc)
                else:
                    if refused:
                        for waiter, (start, end) in zip(waiters, spans, strict=True):
                            error = next(
                                (refused[i] for i in range(start, end) if i in refused), None
                            )
                            _settle([waiter], error)
                    _settle(waiters, None)
        finally:
            # Cancelled mid-flush: nobody may wait forever on a write that will not come.
            _settle(waiters + self._waiters, asyncio.CancelledError())
            self._items, self._waiters, self._spans = [], [], []
            self._task = None

    async def close(self) -> None:
        """Wait for the queued writes to finish."""
        while self._task is not None:
            await asyncio.shield(self._task)


def _settle(waiters: list[asyncio.Future[None]], error: BaseException | None) -> None:
    for waiter in waiters:
        if waiter.done():
            continue
        if isinstance(error, asyncio.CancelledError):
            waiter.cancel()
        elif error is not None:
            waiter.set_exception(error)
        else:
            waiter.set_result(None)
