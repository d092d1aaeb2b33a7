"""A SQLite file of hasten's, opened one way and run on its own worker thread.

hasten keeps four SQLite files: the exact cache's L2 (``cache/sqlite_store.py``), stored
responses (``responses/sqlite_store.py``), virtual keys (``keys/sqlite_store.py``) and the
semantic cache's rows (``semantic/records.py``). Every one is opened by ``open_database``
(WAL, its ``synchronous``, its schema) and groups its writes with ``transaction``. The first
three reach theirs through a ``SQLiteThread``: one worker thread opens the connection on
first use, runs every call off the event loop and closes it; the semantic store runs its
rows on a thread of its own, which its vector index shares.

What a failure means is the store's to say. ``SQLiteThread.run`` raises it (the key store
refuses a key rather than guess); ``SQLiteThread.run_soft`` turns it into the caller's
default (a miss, a dropped write), logs one warning when the file stops answering and one
line when it answers again, and leaves the file alone as the store's ``on_failure`` decides
(``Failure``): for a while, until restart, or not at all when the file was replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, TypeVar

_A = TypeVar("_A")
_R = TypeVar("_R")

# NORMAL: a cache may lose its last writes on power loss, it cannot afford an fsync per
# write. FULL: a write the caller confirmed (a virtual key) is on disk.
Synchronous = Literal["NORMAL", "FULL"]
_FAILURES = (sqlite3.Error, OSError)


def open_database(
    path: Path,
    *,
    schema: str,
    synchronous: Synchronous = "NORMAL",
    busy_timeout_s: float = 5.0,
    check_same_thread: bool = True,
    prepare: Callable[[sqlite3.Connection], None] | None = None,
) -> sqlite3.Connection:
    """The file at ``path`` (its folder made if missing) in WAL mode with ``schema`` applied,
    then ``prepare`` (a migration, a total read once); closed again if any of it fails.

    Autocommit: each statement is its own short transaction unless ``transaction`` groups
    them. ``busy_timeout_s`` is how long a statement waits on another writer's lock.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(
        path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=check_same_thread
    )
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.executescript(schema)
        if prepare is not None:
            prepare(conn)
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection, *, is_immediate: bool = False) -> Iterator[None]:
    """The block's statements as one commit, rolled back if it raises. ``is_immediate``
    takes the write lock at once: what the block reads stays true until it commits."""
    conn.execute("BEGIN IMMEDIATE" if is_immediate else "BEGIN")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class Failure(enum.Enum):
    """What a store's ``on_failure`` made of a failed call, and so how long the file is left
    alone."""

    TRANSIENT = enum.auto()  # a lock, a full disk: tried again after the backoff
    PERMANENT = enum.auto()  # not a database, no permission: left alone until restart
    REPLACED = enum.auto()  # the store put a new file in its place: tried again at once


class SQLiteThread:
    """One SQLite connection, opened, used and closed on one worker thread.

    ``open_connection`` runs on that thread at the first call (and again after
    ``drop_connection``), so the connection never leaves it: SQLite's own same-thread check
    stays on. Calls queue on the thread in the order they were made. Closing twice is
    closing once; a call after ``close`` is refused (``run``) or its default (``run_soft``).
    """

    def __init__(
        self,
        path: Path,
        open_connection: Callable[[], sqlite3.Connection],
        *,
        thread_name: str,
        label: str = "SQLite file",
        logger: logging.Logger | None = None,
        retry_backoff_s: float = 1.0,
        on_failure: Callable[[BaseException], Failure] | None = None,
    ) -> None:
        self.path = path
        self._open_connection = open_connection
        self._label = label  # "<label> at <path> unavailable (...)" in the log
        self._log = logger or logging.getLogger("hasten.storage")
        self._retry_backoff_s = retry_backoff_s
        self._on_failure = on_failure or self._reconnect_later
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)
        self._is_closed = False
        # Written from the worker thread only.
        self._conn: sqlite3.Connection | None = None
        self._is_healthy = True
        self._is_disabled = False
        self._retry_at = 0.0  # time.monotonic() before which the file is left alone

    @property
    def is_healthy(self) -> bool:
        """False from a failed ``run_soft`` call until one succeeds."""
        return self._is_healthy

    def is_usable(self) -> bool:
        """Whether a call now would touch the file (open, not disabled, not backing off)."""
        return not (self._is_closed or self._is_disabled or time.monotonic() < self._retry_at)

    def open_soon(self) -> None:
        """Opens the file on the thread now, without waiting: a store finds a broken file at
        startup, not at its first request. Needs no event loop."""
        self._executor.submit(self._soft, _nothing, None, None)

    async def run(self, operation: Callable[[sqlite3.Connection, _A], _R], arg: _A) -> _R:
        """``operation(connection, arg)`` on the thread; raises what it raises
        (``sqlite3.Error``, ``OSError``), ``RuntimeError`` once closed."""
        if self._is_closed:
            raise RuntimeError(f"{self._label} at {self.path} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._call, operation, arg)

    async def run_soft(
        self, operation: Callable[[sqlite3.Connection, _A], _R], arg: _A, default: _R
    ) -> _R:
        """``operation(connection, arg)`` on the thread, or ``default`` if it fails, the file
        is being left alone, or the thread is closed: never raises a failure of the file."""
        if not self.is_usable():
            return default
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self._soft, operation, arg, default)
        except RuntimeError:  # the executor shut down by a concurrent close()
            return default

    async def close(self) -> None:
        """Closes the connection on its thread; later calls are refused or miss."""
        if self._is_closed:
            return
        self._is_closed = True
        await asyncio.get_running_loop().run_in_executor(self._executor, self.drop_connection)
        self._executor.shutdown(wait=False)

    # --- the worker thread only below ---

    @property
    def connection(self) -> sqlite3.Connection | None:
        """The open connection, if any (for an ``on_failure`` that rolls back)."""
        return self._conn

    def drop_connection(self) -> None:
        """Closes the connection; the next call opens a new one (a lock gone, a file fixed)."""
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None

    def _call(self, operation: Callable[[sqlite3.Connection, _A], _R], arg: _A) -> _R:
        if self._conn is None:
            self._conn = self._open_connection()
        return operation(self._conn, arg)

    def _soft(self, operation: Callable[[sqlite3.Connection, _A], _R], arg: _A, default: _R) -> _R:
        if not self.is_usable():  # closed or failed while this call waited in the queue
            return default
        try:
            result = self._call(operation, arg)
        except _FAILURES as exc:
            self._fail(exc)
            return default
        if not self._is_healthy:
            self._is_healthy = True
            self._log.info("%s at %s recovered", self._label, self.path)
        return result

    def _fail(self, exc: BaseException) -> None:
        failure = self._on_failure(exc)
        if failure is Failure.REPLACED:
            self._is_healthy = False  # until the new file answers; the store said why
            self._retry_at = 0.0
            return
        if failure is Failure.PERMANENT:
            self._is_disabled = True
            self.drop_connection()
        else:
            self._retry_at = time.monotonic() + self._retry_backoff_s
        if self._is_healthy:
            self._is_healthy = False
            self._log.warning(
                "%s at %s unavailable (%s: %s); serving misses and dropping writes%s",
                self._label,
                self.path,
                getattr(exc, "sqlite_errorname", None) or type(exc).__name__,
                exc,
                " until restart"
                if failure is Failure.PERMANENT
                else f", retrying every {self._retry_backoff_s:g} s",
            )

    def _reconnect_later(self, exc: BaseException) -> Failure:
        """The default ``on_failure``: any failure may pass, and a new connection sees a
        file fixed or a lock gone."""
        self.drop_connection()
        return Failure.TRANSIENT


def _nothing(conn: sqlite3.Connection, arg: None) -> None:
    return None
