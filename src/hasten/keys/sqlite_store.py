"""Virtual keys in a SQLite file: they survive restarts and are shared by the worker
processes of one ``hasten serve --workers N`` (WAL mode), not by other machines.

Every call runs on one worker thread, off the event loop. A row is trusted only if its
record passes its checksum (``hasten.keys.codec``) and agrees with the row's id and digest
columns; anything else raises ``DamagedKeyRecord``: the key is refused, never guessed at.
Writes are synchronous (``synchronous=FULL``): a key the admin API confirmed is on disk.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from hasten.errors import DamagedKeyRecord, KeyStoreUnavailable
from hasten.keys.codec import decode, encode
from hasten.keys.record import KeyRecord
from hasten.storage.sqlite import SQLiteThread, open_database, transaction

_log = logging.getLogger("hasten.keys")

A = TypeVar("A")
R = TypeVar("R")
DEFAULT_BUSY_TIMEOUT_S = 2.0
_SCHEMA = """
CREATE TABLE IF NOT EXISTS virtual_keys (
    id TEXT PRIMARY KEY,
    digest BLOB UNIQUE,  -- NULL once revoked: a revoked key is never found
    record BLOB NOT NULL
);
"""
_Row = tuple[str, bytes | None, bytes]


class SqliteKeyStore:
    kind = "sqlite"

    def __init__(self, path: str | Path, *, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S):
        self.path = Path(path)
        self._busy_timeout_s = busy_timeout_s
        self._file = SQLiteThread(self.path, self._open, thread_name="hasten-keys")

    async def find(self, digest: bytes) -> KeyRecord | None:
        row = await self._run("find", _select_digest, digest)
        if row is None:
            return None
        record = _checked(row)
        if record.is_revoked:
            raise DamagedKeyRecord(f"virtual key {row[0]}: revoked but still indexed")
        return record

    async def get(self, key_id: str) -> KeyRecord | None:
        row = await self._run("get", _select_id, key_id)
        return None if row is None else _checked(row)

    async def list_all(self) -> list[KeyRecord]:
        records = []
        for row in await self._run("list", _select_all, None):
            try:
                records.append(_checked(row))
            except DamagedKeyRecord as exc:
                _log.warning("virtual keys: %s left out of the list: %s", _row_id(row), exc)
        return records

    async def add(self, record: KeyRecord, *, max_keys: int) -> bool:
        return await self._run("add", _insert, (record, max_keys))

    async def replace(self, old: KeyRecord, new: KeyRecord) -> bool:
        return await self._run("replace", _update, (old, new))

    async def aclose(self) -> None:
        await self._file.close()

    async def _run(self, what: str, op: Callable[[sqlite3.Connection, A], R], arg: A) -> R:
        try:
            return await self._file.run(op, arg)
        except (sqlite3.Error, OSError, RuntimeError) as exc:
            _log.warning("virtual keys: SQLite %s failed (%s): %s", self.path, what, exc)
            raise KeyStoreUnavailable(f"the key store could not {what}; retry") from None

    def _open(self) -> sqlite3.Connection:  # on the worker thread
        return open_database(
            self.path, schema=_SCHEMA, synchronous="FULL", busy_timeout_s=self._busy_timeout_s
        )


def _checked(row: _Row) -> KeyRecord:
    """The row's record, if it passes its checksum and agrees with the row's columns."""
    key_id, digest, raw = row
    record = decode(bytes(raw))
    indexed = None if record.is_revoked else record.secret_sha256
    if record.key_id != key_id or (None if digest is None else bytes(digest)) != indexed:
        raise DamagedKeyRecord(f"virtual key {_row_id(row)}: row and record disagree")
    return record


def _row_id(row: _Row) -> str:
    return repr(row[0])[:40]


def _select_digest(conn: sqlite3.Connection, digest: bytes) -> _Row | None:
    sql = "SELECT id, digest, record FROM virtual_keys WHERE digest = ?"
    row: _Row | None = conn.execute(sql, (digest,)).fetchone()
    return row


def _select_id(conn: sqlite3.Connection, key_id: str) -> _Row | None:
    sql = "SELECT id, digest, record FROM virtual_keys WHERE id = ?"
    row: _Row | None = conn.execute(sql, (key_id,)).fetchone()
    return row


def _select_all(conn: sqlite3.Connection, _: None) -> list[_Row]:
    sql = "SELECT id, digest, record FROM virtual_keys ORDER BY rowid"
    return list(conn.execute(sql).fetchall())


def _insert(conn: sqlite3.Connection, arg: tuple[KeyRecord, int]) -> bool:
    record, max_keys = arg
    with transaction(conn, is_immediate=True):  # the count and the insert, no writer between
        (count,) = conn.execute("SELECT COUNT(*) FROM virtual_keys").fetchone()
        if count >= max_keys:
            return False
        digest = None if record.is_revoked else record.secret_sha256
        conn.execute(
            "INSERT INTO virtual_keys (id, digest, record) VALUES (?, ?, ?)",
            (record.key_id, digest, encode(record)),
        )
    return True


def _update(conn: sqlite3.Connection, arg: tuple[KeyRecord, KeyRecord]) -> bool:
    old, new = arg
    digest = None if new.is_revoked else new.secret_sha256
    cursor = conn.execute(
        "UPDATE virtual_keys SET digest = ?, record = ? WHERE id = ? AND record = ?",
        (digest, encode(new), old.key_id, encode(old)),
    )
    return cursor.rowcount == 1
