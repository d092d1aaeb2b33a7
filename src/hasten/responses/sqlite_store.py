"""Stored responses in a SQLite file (WAL), off the event loop on one worker thread.

A row is the record's checksummed bytes (``hasten.responses.record``): one that fails its
checksum or does not parse is a miss, and deleted. The file's total stays under
``max_bytes``: past it the oldest rows go first (to a low-water mark, so that eviction does
not run on every write); expired rows are purged every few hundred writes and are never
served. A failing file logs one warning and serves misses, as the cache's SQLite tier does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from hasten.responses.record import DamagedRecord, StoredResponse, decode, encode

_log = logging.getLogger("hasten.responses")
_A = TypeVar("_A")
_R = TypeVar("_R")

_TABLE = "hasten_responses_v1"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {_TABLE} (
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    value BLOB NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    size_bytes INTEGER NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX IF NOT EXISTS {_TABLE}_created ON {_TABLE} (created_at);
CREATE INDEX IF NOT EXISTS {_TABLE}_expires ON {_TABLE} (expires_at);
"""
_SELECT = f"SELECT value, expires_at FROM {_TABLE} WHERE tenant = ? AND id = ?"
_UPSERT = (
    f"INSERT INTO {_TABLE} (tenant, id, value, created_at, expires_at, size_bytes)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, id) DO UPDATE SET"
    " value = excluded.value, created_at = excluded.created_at,"
    " expires_at = excluded.expires_at, size_bytes = excluded.size_bytes"
)
_DELETE = f"DELETE FROM {_TABLE} WHERE tenant = ? AND id = ?"
_PURGE = f"DELETE FROM {_TABLE} WHERE expires_at <= ?"
_TOTAL = f"SELECT total(size_bytes) FROM {_TABLE}"
_OLDEST = f"SELECT tenant, id, size_bytes FROM {_TABLE} ORDER BY created_at"
_PURGE_EVERY_PUTS = 256
_LOW_WATER_FRACTION = 0.9
_RETRY_BACKOFF_S = 1.0


class SQLiteResponseStore:
    kind = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int,
        max_record_bytes: int,
        busy_timeout_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.max_record_bytes = max_record_bytes
        self._busy_timeout_s = busy_timeout_s
        self._clock = clock
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hasten-responses")
        self._is_closed = False
        # Below: written from the worker thread only.
        self._conn: sqlite3.Connection | None = None
        self._is_healthy = True
        self._retry_at = 0.0
        self._approx_bytes = 0.0
        self._puts_since_purge = 0
        self.num_damaged = 0

    @property
    def is_healthy(self) -> bool:
        return self._is_healthy

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        return await self._submit(self._get_sync, (tenant, response_id), None)

    async def put(self, record: StoredResponse) -> bool:
        value = encode(record)
        if len(value) > self.max_record_bytes:
            return False
        return await self._submit(self._put_sync, (record, value), False)

    async def delete(self, tenant: str, response_id: str) -> bool:
        return await self._submit(self._delete_sync, (tenant, response_id), False)

    async def aclose(self) -> None:
        if self._is_closed:
            return
        self._is_closed = True
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close_sync)
        self._executor.shutdown(wait=False)

    async def _submit(
        self, operation: Callable[[sqlite3.Connection, _A], _R], arg: _A, default: _R
    ) -> _R:
        if self._is_closed:
            return default
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._executor, self._guarded, operation, arg, default
            )
        except RuntimeError:  # the executor shut down by a concurrent close
            return default

    # --- the worker thread only below ---

    def _guarded(
        self, operation: Callable[[sqlite3.Connection, _A], _R], arg: _A, default: _R
    ) -> _R:
        if self._is_closed or time.monotonic() < self._retry_at:
            return default
        try:
            if self._conn is None:
                self._conn = self._open()
            result = operation(self._conn, arg)
        except (sqlite3.Error, OSError) as exc:
            self._retry_at = time.monotonic() + _RETRY_BACKOFF_S
            self._close_sync()  # a new connection next time (a file fixed, a lock gone)
            if self._is_healthy:
                self._is_healthy = False
                _log.warning(
                    "stored responses at %s unavailable (%s: %s); serving misses, "
                    "retrying every %.0f s",
                    self.path,
                    getattr(exc, "sqlite_errorname", None) or type(exc).__name__,
                    exc,
                    _RETRY_BACKOFF_S,
                )
            return default
        if not self._is_healthy:
            self._is_healthy = True
            _log.info("stored responses at %s recovered", self.path)
        return result

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=self._busy_timeout_s, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
            self._approx_bytes = conn.execute(_TOTAL).fetchone()[0]
        except BaseException:
            conn.close()
            raise
        return conn

    def _get_sync(self, conn: sqlite3.Connection, key: tuple[str, str]) -> StoredResponse | None:
        row = conn.execute(_SELECT, key).fetchone()
        if row is None:
            return None
        value, expires_at = row
        if expires_at <= self._clock():
            return None  # purged in bulk by the writes
        try:
            record = decode(bytes(value))
        except DamagedRecord as exc:
            self.num_damaged += 1
            _log.warning("stored responses at %s: dropped a damaged row (%s)", self.path, exc)
            with contextlib.suppress(sqlite3.Error):
                conn.execute(_DELETE, key)
            return None
        if (record.tenant, record.response_id) != key:
            return None  # a row moved under another key is not this tenant's
        return record

    def _put_sync(self, conn: sqlite3.Connection, item: tuple[StoredResponse, bytes]) -> bool:
        record, value = item
        now = self._clock()
        conn.execute(
            _UPSERT,
            (
                record.tenant,
                record.response_id,
                value,
                record.created_s,
                record.expires_s,
                len(value),
            ),
        )
        self._approx_bytes += len(value)
        self._puts_since_purge += 1
        if self._puts_since_purge >= _PURGE_EVERY_PUTS:
            self._puts_since_purge = 0
            conn.execute(_PURGE, (now,))
            self._approx_bytes = conn.execute(_TOTAL).fetchone()[0]
        if self._approx_bytes > self.max_bytes:
            self._evict(conn, now)
        return True

    def _evict(self, conn: sqlite3.Connection, now: float) -> None:
        """Purges expired rows, then the oldest down to the low-water mark."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(_PURGE, (now,))
            total = conn.execute(_TOTAL).fetchone()[0]
            target = self.max_bytes * _LOW_WATER_FRACTION
            victims: list[tuple[str, str]] = []
            if total > self.max_bytes:
                for tenant, response_id, size_bytes in conn.execute(_OLDEST):
                    if total <= target:
                        break
                    victims.append((tenant, response_id))
                    total -= size_bytes
            conn.executemany(_DELETE, victims)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self._approx_bytes = total

    def _delete_sync(self, conn: sqlite3.Connection, key: tuple[str, str]) -> bool:
        return conn.execute(_DELETE, key).rowcount > 0

    def _close_sync(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None
