"""The semantic cache's SQLite file: one row per cached question (vector, text, answer key).

Blocking; used only from the semantic store's worker thread. Vectors are stored as float16
(half the bytes, cosine error ~1e-4), so any ANN index can be rebuilt from this file alone.
A row may wait for its vector (an empty blob: imported where only repeats are served, found
by its text meanwhile); such rows are in no index until ``set_vector`` gives them one.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hasten.storage.sqlite import open_database, transaction

_TABLE = "hasten_semantic_v1"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {_TABLE} (
    id INTEGER PRIMARY KEY,
    partition TEXT NOT NULL,
    tenant TEXT NOT NULL,
    model TEXT NOT NULL,
    text TEXT NOT NULL,
    vector BLOB NOT NULL,
    answer_key TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    accessed_at REAL NOT NULL,
    num_hits INTEGER NOT NULL DEFAULT 0,
    size_bytes INTEGER NOT NULL,
    observations BLOB  -- unused since issue 40 (error-budget mode); kept for old files
);
CREATE INDEX IF NOT EXISTS {_TABLE}_partition ON {_TABLE} (partition);
CREATE INDEX IF NOT EXISTS {_TABLE}_tenant ON {_TABLE} (tenant);
CREATE INDEX IF NOT EXISTS {_TABLE}_model ON {_TABLE} (model);
CREATE INDEX IF NOT EXISTS {_TABLE}_expires ON {_TABLE} (expires_at);
CREATE INDEX IF NOT EXISTS {_TABLE}_accessed ON {_TABLE} (accessed_at);
CREATE TABLE IF NOT EXISTS {_TABLE}_meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
"""
# Columns added after the first release: files written before them get them on open. Files
# written before issue 40 may have an ``answer_class`` column too (answer classes, removed):
# nothing reads or writes it.
_ADDED_COLUMNS = {"text_key": "INTEGER"}
# A repeated question (``text_key``: its text's hash) is found without a vector. Rows
# written before the column have none: they are in partitions of an older form
# (``partition``), which no lookup reads.
_TEXT_INDEX = f"CREATE INDEX IF NOT EXISTS {_TABLE}_text ON {_TABLE} (partition, text_key)"
# Partial: only rows waiting for their vector are in it, so finding them never scans.
_PENDING_INDEX = (
    f"CREATE INDEX IF NOT EXISTS {_TABLE}_pending ON {_TABLE} (id) WHERE length(vector) = 0"
)
# Rough per-row overhead of SQLite plus the in-memory index (graph links, id maps).
ROW_OVERHEAD_BYTES = 256
# What a lookup reads of a row (``StoredEntry``).
_SELECT_ENTRIES = f"SELECT id, partition, text, answer_key, expires_at FROM {_TABLE}"


@dataclass(frozen=True, slots=True)
class Row:
    """A question to store: its partition (and so its tenant's), text, where its answer is,
    when it was stored and when it expires."""

    partition: str
    tenant: str
    model: str
    text: str
    answer_key: str
    created_at: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """What a lookup needs of a candidate row."""

    entry_id: int
    partition: str
    text: str
    answer_key: str
    expires_at: float


class Records:
    """Rows of the semantic cache in one SQLite file (WAL mode)."""

    def __init__(self, path: Path) -> None:
        self.conn = open_database(
            path, schema=_SCHEMA, check_same_thread=False, prepare=_add_missing_columns
        )

    def close(self) -> None:
        self.conn.close()

    def transaction(self) -> AbstractContextManager[None]:
        """Groups writes into one commit (the connection commits each statement otherwise)."""
        return transaction(self.conn)

    def get_meta(self, name: str) -> bytes | None:
        row = self.conn.execute(f"SELECT value FROM {_TABLE}_meta WHERE name = ?", (name,))
        found = row.fetchone()
        return bytes(found[0]) if found else None

    def set_meta(self, name: str, value: bytes) -> None:
        self.conn.execute(
            f"INSERT INTO {_TABLE}_meta (name, value) VALUES (?, ?)"
            " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            (name, value),
        )

    def clear(self) -> None:
        self.conn.execute(f"DELETE FROM {_TABLE}")

    def insert(
        self, row: Row, vector: npt.NDArray[np.float32] | None, entry_id: int | None = None
    ) -> int:
        """The row's id; ``entry_id`` None lets SQLite pick (local mode), else it is kept.
        ``vector`` None: the row waits for ``set_vector``."""
        blob = b"" if vector is None else vector_bytes(vector)
        text, answer_key = row.text, row.answer_key
        size_bytes = len(blob) + len(text.encode()) + len(answer_key) + ROW_OVERHEAD_BYTES
        cursor = self.conn.execute(
            f"INSERT INTO {_TABLE} (id, partition, tenant, model, text, vector, answer_key,"
            " created_at, expires_at, accessed_at, size_bytes, text_key)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                *(entry_id, row.partition, row.tenant, row.model, text, blob, answer_key),
                *(row.created_at, row.expires_at, row.created_at, size_bytes, text_key(text)),
            ),
        )
        return int(cursor.lastrowid or 0)

    def set_vector(self, entry_id: int, vector: npt.NDArray[np.float32]) -> bool:
        """Gives a row waiting for its vector this one; False if it no longer waits (gone)."""
        blob = vector_bytes(vector)
        cursor = self.conn.execute(
            f"UPDATE {_TABLE} SET vector = ?, size_bytes = size_bytes + ?"
            " WHERE id = ? AND length(vector) = 0",
            (blob, len(blob), entry_id),
        )
        return cursor.rowcount > 0

    def pending(self, limit: int) -> list[tuple[int, str, str]]:
        """``(id, partition, text)`` of up to ``limit`` rows waiting for a vector, oldest first."""
        rows = self.conn.execute(
            f"SELECT id, partition, text FROM {_TABLE} WHERE length(vector) = 0"
            " ORDER BY id LIMIT ?",
            (limit,),
        )
        return [(int(row[0]), row[1], row[2]) for row in rows]

    def count_pending(self) -> int:
        row = self.conn.execute(f"SELECT count(*) FROM {_TABLE} WHERE length(vector) = 0")
        return int(row.fetchone()[0])

    def has(self, entry_id: int) -> bool:
        row = self.conn.execute(f"SELECT 1 FROM {_TABLE} WHERE id = ?", (entry_id,))
        return row.fetchone() is not None

    def next_id_from(self, base: int) -> int:
        """The next id at or above ``base`` (ids handed out without the shared counter)."""
        row = self.conn.execute(f"SELECT max(id) FROM {_TABLE} WHERE id >= ?", (base,))
        found = row.fetchone()[0]
        return base if found is None else int(found) + 1

    def entries(self, ids: Sequence[int]) -> dict[int, StoredEntry]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = self.conn.execute(f"{_SELECT_ENTRIES} WHERE id IN ({marks})", tuple(ids))
        return {int(row[0]): _stored_entry(row) for row in rows}

    def entries_with_text(self, partition: str, text: str) -> list[StoredEntry]:
        """The partition's rows whose question is ``text``, by id."""
        rows = self.conn.execute(
            f"{_SELECT_ENTRIES} WHERE partition = ? AND text_key = ? ORDER BY id",
            (partition, text_key(text)),
        )
        found = (_stored_entry(row) for row in rows)  # compared: two texts' keys may collide
        return [entry for entry in found if entry.text == text]

    def partition_vectors(
        self, partition: str, dim: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        rows = self.conn.execute(
            f"SELECT id, vector FROM {_TABLE} WHERE partition = ? AND length(vector) > 0"
            " ORDER BY id",
            (partition,),
        ).fetchall()
        ids = np.array([row[0] for row in rows], dtype=np.int64)
        return ids, vector_of(b"".join(row[1] for row in rows)).reshape(len(rows), dim)

    def partition_digest(self, partition: str) -> tuple[int, int]:
        """(row count, sum of ids) of the rows with a vector: tells whether a saved graph
        still matches them."""
        row = self.conn.execute(
            f"SELECT count(*), coalesce(sum(id), 0) FROM {_TABLE}"
            " WHERE partition = ? AND length(vector) > 0",
            (partition,),
        ).fetchone()
        return int(row[0]), int(row[1])

    def touch(self, entry_id: int, now: float) -> None:
        self.conn.execute(
            f"UPDATE {_TABLE} SET accessed_at = ?, num_hits = num_hits + 1 WHERE id = ?",
            (now, entry_id),
        )

    def totals(self) -> tuple[int, int]:
        row = self.conn.execute(f"SELECT count(*), coalesce(sum(size_bytes), 0) FROM {_TABLE}")
        count, size_bytes = row.fetchone()
        return int(count), int(size_bytes)

    def select_victims(self, num_rows: int) -> list[tuple[int, str]]:
        """The ``num_rows`` least recently used rows."""
        rows = self.conn.execute(
            f"SELECT id, partition FROM {_TABLE} ORDER BY accessed_at LIMIT ?", (num_rows,)
        )
        return [(int(row[0]), row[1]) for row in rows]

    def select_where(
        self,
        *,
        entry_id: int | None = None,
        tenant: str | None = None,
        model: str | None = None,
        created_before: float | None = None,
        expired_at: float | None = None,
        ids_below: int | None = None,
    ) -> list[tuple[int, str]]:
        """Ids and partitions of rows matching every given condition (all rows if none)."""
        where, values = _where(
            ("id", "=", entry_id),
            ("id", "<", ids_below),
            ("tenant", "=", tenant),
            ("model", "=", model),
            ("created_at", "<", created_before),
            ("expires_at", "<=", expired_at),
        )
        rows = self.conn.execute(f"SELECT id, partition FROM {_TABLE}{where}", values)
        return [(int(row[0]), row[1]) for row in rows]

    def count_where(self, *, entry_id: int | None = None, tenant: str | None = None) -> int:
        """Rows matching every given condition, counted in SQLite (a tenant may hold many)."""
        where, values = _where(("id", "=", entry_id), ("tenant", "=", tenant))
        row = self.conn.execute(f"SELECT COUNT(*) FROM {_TABLE}{where}", values).fetchone()
        return int(row[0])

    def delete(self, ids: Iterable[int]) -> None:
        self.conn.executemany(f"DELETE FROM {_TABLE} WHERE id = ?", ((i,) for i in ids))


def vector_bytes(vector: npt.NDArray[np.float32]) -> bytes:
    """A vector as stored (in the file and the shared tier): float16."""
    return np.asarray(vector, dtype=np.float16).tobytes()


def vector_of(stored: bytes) -> npt.NDArray[np.float32]:
    """``vector_bytes`` read back (several vectors: one flat array)."""
    return np.frombuffer(stored, dtype=np.float16).astype(np.float32)


def text_key(text: str) -> int:
    """A 64-bit key of the question's text (a signed SQLite integer)."""
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    """Columns and indexes added after the first release, on a file written before them."""
    for column, kind in _ADDED_COLUMNS.items():
        if column in _columns(conn):
            continue
        try:
            conn.execute(f"ALTER TABLE {_TABLE} ADD COLUMN {column} {kind}")
        except sqlite3.OperationalError:
            if column not in _columns(conn):  # else another process added it first
                raise
    conn.execute(_TEXT_INDEX)
    conn.execute(_PENDING_INDEX)
    # LFU eviction's order, gone with it (issue 40): a hit no longer pays for its update.
    conn.execute(f"DROP INDEX IF EXISTS {_TABLE}_hits")


def _columns(conn: sqlite3.Connection) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({_TABLE})")}


def _where(*conditions: tuple[str, str, object]) -> tuple[str, list[object]]:
    """A WHERE clause (or nothing) for the conditions whose value is not None."""
    clauses: list[str] = []
    values: list[object] = []
    for column, operator, value in conditions:
        if value is not None:
            clauses.append(f"{column} {operator} ?")
            values.append(value)
    return (f" WHERE {' AND '.join(clauses)}" if clauses else ""), values


def _stored_entry(row: tuple[Any, ...]) -> StoredEntry:
    entry_id, partition, text, answer_key, expires_at = row
    return StoredEntry(int(entry_id), partition, text, answer_key, float(expires_at))
