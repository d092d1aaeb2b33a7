"""L2, embedded default: answers in a SQLite file, off the event loop on one worker thread."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from hasten.cache.entry import CachedAnswer
from hasten.errors import OutdatedCacheEntry
from hasten.storage.budget import TableBudget
from hasten.storage.sqlite import Failure, SQLiteThread, open_database

_LOG = logging.getLogger("hasten.cache")

_TABLE = "hasten_cache_v1"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {_TABLE} (
    key TEXT PRIMARY KEY,
    value BLOB NOT NULL,
    expires_at REAL NOT NULL,
    accessed_at REAL NOT NULL,
    size_bytes INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS {_TABLE}_expires ON {_TABLE} (expires_at);
CREATE INDEX IF NOT EXISTS {_TABLE}_accessed ON {_TABLE} (accessed_at);
"""
_SELECT = f"SELECT value, expires_at, accessed_at FROM {_TABLE} WHERE key = ?"
_UPSERT = (
    f"INSERT INTO {_TABLE} (key, value, expires_at, accessed_at, size_bytes)"
    " VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value,"
    " expires_at = excluded.expires_at, accessed_at = excluded.accessed_at,"
    " size_bytes = excluded.size_bytes"
)
_TOUCH = f"UPDATE {_TABLE} SET accessed_at = ? WHERE key = ?"
_DELETE = f"DELETE FROM {_TABLE} WHERE key = ?"

# Errors that will not go away by waiting: stop touching the file until restart.
_PERMANENT_ERRORS = frozenset(
    {"SQLITE_NOTADB", "SQLITE_CORRUPT", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH"}
)
# A damaged file is not worth repairing: it is moved aside (kept for inspection) and a new
# one started. Bounded, so a disk that keeps corrupting files cannot fill itself with copies.
_CORRUPTION_ERRORS = frozenset({"SQLITE_NOTADB", "SQLITE_CORRUPT"})
_MAX_FILES_MOVED_ASIDE = 3
_SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
# LRU order only needs to be roughly right; don't turn every hit into a write.
_TOUCH_INTERVAL_S = 60.0
_PURGE_EVERY_PUTS = 512


class SQLiteStore:
    """Answers persisted in a WAL-mode SQLite file; survives restarts.

    Every call runs on a dedicated worker thread, which opens the file at construction.
    Failures never raise: an unreadable or locked database logs one warning, reads miss and
    writes are dropped (``is_healthy`` is False). Locks and other transient errors are
    retried after ``retry_backoff_s``. A corrupt file (at startup or later) is moved to
    ``<path>.corrupt-<UTC timestamp>`` and a new one started; an entry failing its checksum
    is a miss and deleted. Both are counted (``counters``). ``max_bytes`` bounds the stored
    payloads (approximate, least recently used go first).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int = 1024 * 1024 * 1024,
        busy_timeout_s: float = 0.1,
        retry_backoff_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self._busy_timeout_s = busy_timeout_s
        self._clock = clock
        self._file = SQLiteThread(
            self.path,
            self._open,
            thread_name="hasten-sqlite",
            label="SQLite cache",
            logger=_LOG,
            retry_backoff_s=retry_backoff_s,
            on_failure=self._on_failure,
        )
        # Everything below is only written from the worker thread.
        self._budget = TableBudget(
            _TABLE,
            key_columns=("key",),
            evict_order="accessed_at",  # least recently used first
            max_bytes=max_bytes,
            purge_every_puts=_PURGE_EVERY_PUTS,
        )
        self._num_bad_entries = 0
        self._num_outdated_entries = 0
        self._num_corruptions = 0
        self._moved_aside: list[Path] = []
        self._file.open_soon()  # a corrupt file is found (and replaced) at startup

    @property
    def is_healthy(self) -> bool:
        return self._file.is_healthy

    def counters(self) -> dict[str, int]:
        """Entries dropped for a bad checksum or an old format; corrupt files replaced."""
        return {
            "bad_entries": self._num_bad_entries,
            "outdated_entries": self._num_outdated_entries,
            "corruptions": self._num_corruptions,
        }

    @property
    def moved_aside(self) -> list[Path]:
        """Where corrupt files were moved, oldest first."""
        return list(self._moved_aside)

    async def get(self, key: str) -> CachedAnswer | None:
        """The stored entry if present and unexpired; None on a miss or any failure."""
        return await self._file.run_soft(self._get_sync, key, None)

    async def put(self, key: str, entry: CachedAnswer) -> bool:
        """Stores ``entry`` until it expires; False if the write was dropped."""
        return await self._file.run_soft(self._put_sync, (key, entry), False)

    async def delete(self, key: str) -> bool:
        """Removes ``key``; True if a row was deleted."""
        return await self._file.run_soft(self._delete_sync, key, False)

    async def close(self) -> None:
        """Closes the database; later calls miss."""
        await self._file.close()

    # --- worker thread only below ---

    def _open(self) -> sqlite3.Connection:
        return open_database(
            self.path,
            schema=_SCHEMA,
            busy_timeout_s=self._busy_timeout_s,
            prepare=self._budget.recount,
        )

    def _on_failure(self, exc: BaseException) -> Failure:
        error_name = _primary_error_name(exc)
        if error_name in _CORRUPTION_ERRORS:
            self._num_corruptions += 1
            if len(self._moved_aside) < _MAX_FILES_MOVED_ASIDE and self._move_aside(exc):
                return Failure.REPLACED
        if isinstance(exc, OSError) or error_name in _PERMANENT_ERRORS:
            return Failure.PERMANENT
        if error_name == "SQLITE_READONLY":
            # SQLite opens a file it cannot write read-only and stays so: only a new
            # connection sees the file writable again (permissions fixed, disk remounted).
            self._file.drop_connection()
        else:
            self._rollback()
        return Failure.TRANSIENT

    def _move_aside(self, exc: BaseException) -> bool:
        """Renames the corrupt file (and its WAL) for inspection; the next call starts anew."""
        self._file.drop_connection()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        kept = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        suffix = 1
        while kept.exists():
            suffix += 1
            kept = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{suffix}")
        try:
            self.path.rename(kept)
            for side in _SQLITE_SIDE_FILES:
                side_path = Path(f"{self.path}{side}")
                if side_path.exists():
                    side_path.rename(f"{kept}{side}")
        except OSError as rename_error:
            _LOG.warning(
                "SQLite cache at %s is corrupt and cannot be moved aside: %s",
                self.path,
                rename_error,
            )
            return False
        self._moved_aside.append(kept)
        _LOG.warning(
            "SQLite cache at %s is corrupt (%s: %s); moved it to %s for inspection and "
            "started a new one",
            self.path,
            getattr(exc, "sqlite_errorname", type(exc).__name__),
            exc,
            kept,
        )
        return True

    def _rollback(self) -> None:
        """Ends a transaction the failure left open; a connection that cannot is dropped."""
        conn = self._file.connection
        if conn is None or not conn.in_transaction:
            return
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            self._file.drop_connection()

    def _get_sync(self, conn: sqlite3.Connection, key: str) -> CachedAnswer | None:
        row = conn.execute(_SELECT, (key,)).fetchone()
        if row is None:
            return None
        value, expires_at, accessed_at = row
        now = self._clock()
        if expires_at <= now:
            return None  # purged in bulk by _put_sync, not on the read path
        try:
            entry = CachedAnswer.decode(value)
        except OutdatedCacheEntry:
            self._num_outdated_entries += 1
            self._best_effort(conn, _DELETE, (key,))
            return None
        except ValueError as exc:
            self._num_bad_entries += 1
            if self._num_bad_entries == 1:
                _LOG.warning("SQLite cache at %s: dropped a damaged entry (%s)", self.path, exc)
            self._best_effort(conn, _DELETE, (key,))
            return None
        if now - accessed_at > _TOUCH_INTERVAL_S:
            self._best_effort(conn, _TOUCH, (now, key))
        return entry

    def _put_sync(self, conn: sqlite3.Connection, item: tuple[str, CachedAnswer]) -> bool:
        key, entry = item
        now = self._clock()
        if not entry.is_fresh(now):
            return True
        value = entry.encode()
        size_bytes = len(key) + len(value)
        if size_bytes > self.max_bytes:
            return False
        conn.execute(_UPSERT, (key, value, entry.expires_at, now, size_bytes))
        self._budget.note_put(conn, size_bytes, now)
        return True

    def _delete_sync(self, conn: sqlite3.Connection, key: str) -> bool:
        return conn.execute(_DELETE, (key,)).rowcount > 0

    def _best_effort(self, conn: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> None:
        # Housekeeping on the read path must not turn a hit into a failure.
        with contextlib.suppress(sqlite3.OperationalError):
            conn.execute(sql, params)


def _primary_error_name(exc: BaseException) -> str | None:
    """``SQLITE_CORRUPT`` for ``SQLITE_CORRUPT_INDEX`` too: SQLite reports extended codes
    (``<primary>_<detail>``), and a malformed index is as corrupt as a malformed table."""
    name = getattr(exc, "sqlite_errorname", None)
    if not isinstance(name, str):
        return None
    return "_".join(name.split("_")[:2])
