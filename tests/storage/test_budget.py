"""hasten.storage.budget: a table kept under its byte budget, expired rows first, then the
first in line, down to a low-water mark; the total read back at open."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from hasten.storage.budget import TableBudget
from hasten.storage.sqlite import open_database

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rows (
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    expires_at REAL NOT NULL,
    rank REAL NOT NULL,
    size_bytes INTEGER NOT NULL,
    PRIMARY KEY (tenant, id)
);
"""


def _budget(max_bytes: int, *, purge_every_puts: int = 1000) -> TableBudget:
    return TableBudget(
        "rows",
        key_columns=("tenant", "id"),
        evict_order="rank",
        max_bytes=max_bytes,
        purge_every_puts=purge_every_puts,
    )


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    connection = open_database(tmp_path / "rows.sqlite3", schema=_SCHEMA)
    yield connection
    connection.close()


def _put(
    conn: sqlite3.Connection,
    budget: TableBudget,
    row_id: str,
    *,
    size_bytes: int = 100,
    rank: float = 0.0,
    expires_at: float = 1e12,
    now: float = 0.0,
) -> None:
    conn.execute(
        "INSERT INTO rows VALUES (?, ?, ?, ?, ?)",
        ("t", row_id, expires_at, rank, size_bytes),
    )
    budget.note_put(conn, size_bytes, now)


def _full(conn: sqlite3.Connection) -> TableBudget:
    """A budget of 1000 bytes, and ten rows of 100 (r0 to r9, ranked so): at it, not past."""
    budget = _budget(1000)
    for n in range(10):
        _put(conn, budget, f"r{n}", rank=float(n))
    return budget


def _ids(conn: sqlite3.Connection) -> list[str]:
    return [row[0] for row in conn.execute("SELECT id FROM rows ORDER BY rank")]


def test_past_the_budget_the_first_in_line_go_down_to_the_low_water_mark(
    conn: sqlite3.Connection,
) -> None:
    budget = _full(conn)
    assert _ids(conn) == [f"r{n}" for n in range(10)]
    _put(conn, budget, "r10", rank=10.0)
    # 1100 bytes: evicted down to 900 (the low-water mark), lowest rank first.
    assert _ids(conn) == [f"r{n}" for n in range(2, 11)]
    assert budget.approx_bytes == 900


def test_expired_rows_go_before_any_live_one(conn: sqlite3.Connection) -> None:
    budget = _budget(1000)
    for n in range(9):
        _put(conn, budget, f"live{n}", rank=float(n))
    _put(conn, budget, "expired", rank=100.0, expires_at=5.0)
    _put(conn, budget, "new", rank=200.0, now=10.0)
    assert "expired" not in _ids(conn)
    assert _ids(conn)[0] == "live0"  # the expired row alone brought it back under
    assert budget.approx_bytes == 1000


def test_expired_rows_are_purged_every_few_writes(conn: sqlite3.Connection) -> None:
    budget = _budget(1 << 30, purge_every_puts=3)
    _put(conn, budget, "a", expires_at=5.0)
    _put(conn, budget, "b", expires_at=5.0, now=10.0)
    assert set(_ids(conn)) == {"a", "b"}
    _put(conn, budget, "c", now=10.0)  # the third write purges
    assert _ids(conn) == ["c"]
    assert budget.approx_bytes == 100


def test_the_total_is_read_back_at_open(tmp_path: Path) -> None:
    path = tmp_path / "rows.sqlite3"
    first = _budget(1000)
    conn = open_database(path, schema=_SCHEMA, prepare=first.recount)
    for n in range(8):
        _put(conn, first, f"r{n}", rank=float(n))
    conn.close()
    second = _budget(1000)
    conn = open_database(path, schema=_SCHEMA, prepare=second.recount)
    try:
        assert second.approx_bytes == 800
        _put(conn, second, "r8", rank=8.0)
        _put(conn, second, "r9", rank=9.0)
        _put(conn, second, "r10", rank=10.0)  # past the budget only with the file's rows
        assert len(_ids(conn)) == 9
    finally:
        conn.close()


def test_an_eviction_that_fails_leaves_every_row_and_the_total(
    conn: sqlite3.Connection,
) -> None:
    budget = _full(conn)
    conn.execute(
        "CREATE TRIGGER refuse BEFORE DELETE ON rows BEGIN SELECT RAISE(ABORT, 'refused'); END"
    )
    conn.execute("INSERT INTO rows VALUES ('t', 'r10', 1e12, 10.0, 100)")
    with pytest.raises(sqlite3.IntegrityError, match="refused"):
        budget.note_put(conn, 100, 0.0)
    assert not conn.in_transaction
    assert len(_ids(conn)) == 11
    assert budget.approx_bytes == 1100  # still past: the next write tries again
