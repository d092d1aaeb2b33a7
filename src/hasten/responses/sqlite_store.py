"""Stored responses in a SQLite file (WAL), off the event loop on one worker thread.

A row is the record's checksummed bytes (``hasten.responses.record``): one that fails its
checksum or does not parse is a miss, and deleted. The file's total stays under
``max_bytes``: past it the oldest rows go first (to a low-water mark, so that eviction does
not run on every write); expired rows are purged every few hundred writes and are never
served. A failing file logs one warning and serves misses, as the cache's SQLite tier does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from hasten.responses.record import DamagedRecord, StoredResponse, decode, encode
from hasten.storage.budget import TableBudget
from hasten.storage.sqlite import SQLiteThread, open_database

_log = logging.getLogger("hasten.responses")

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
_PURGE_EVERY_PUTS = 256
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
        # Any failure: misses for a second, then a new connection (a file fixed, a lock gone).
        self._file = SQLiteThread(
            self.path,
            self._open,
            thread_name="hasten-responses",
            label="stored responses",
            logger=_log,
            retry_backoff_s=_RETRY_BACKOFF_S,
        )
        # Below: written from the worker thread only.
        self._budget = TableBudget(
            _TABLE,
            key_columns=("tenant", "id"),
            evict_order="created_at",  # the oldest first
            max_bytes=max_bytes,
            purge_every_puts=_PURGE_EVERY_PUTS,
        )
        self.num_damaged = 0

    @property
    def is_healthy(self) -> bool:
        return self._file.is_healthy

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        return await self._file.run_soft(self._get_sync, (tenant, response_id), None)

    async def put(self, record: StoredResponse) -> bool:
        value = encode(record)
        if len(value) > self.max_record_bytes:
            return False
        return await self._file.run_soft(self._put_sync, (record, value), False)

    async def delete(self, tenant: str, response_id: str) -> bool:
        return await self._file.run_soft(self._delete_sync, (tenant, response_id), False)

    async def aclose(self) -> None:
        await self._file.close()

    # --- the worker thread only below ---

    def _open(self) -> sqlite3.Connection:
        return open_database(
            self.path,
            schema=_SCHEMA,
            busy_timeout_s=self._busy_timeout_s,
            prepare=self._budget.recount,
        )

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
        self._budget.note_put(conn, len(value), now)
        return True

    def _delete_sync(self, conn: sqlite3.Connection, key: tuple[str, str]) -> bool:
        return conn.execute(_DELETE, key).rowcount > 0
