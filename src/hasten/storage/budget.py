"""A SQLite table held to a byte budget: expired rows purged, the first in line evicted.

The exact cache's L2 (least recently used first) and stored responses (oldest first) keep
rows with ``expires_at`` and ``size_bytes`` columns whose sizes together must stay under
``max_bytes``. ``TableBudget`` keeps that total, approximately (read exactly at open and at
every purge, added to on every write); every ``purge_every_puts`` writes it deletes the
expired rows, and past the budget it purges and evicts in one transaction down to a
low-water mark, so that eviction does not run on every write. Blocking: it runs on the
store's worker thread (``storage.sqlite.SQLiteThread``).
"""

from __future__ import annotations

import sqlite3

from hasten.storage.sqlite import transaction

# Evicted down to this share of the budget: the next few writes fit without evicting again.
_LOW_WATER_FRACTION = 0.9


class TableBudget:
    """``max_bytes`` of rows in ``table``, evicted in ``evict_order`` (an ORDER BY clause)
    and deleted by their ``key_columns``."""

    def __init__(
        self,
        table: str,
        *,
        key_columns: tuple[str, ...],
        evict_order: str,
        max_bytes: int,
        purge_every_puts: int,
    ) -> None:
        self.max_bytes = max_bytes
        self._purge_every_puts = purge_every_puts
        keys = ", ".join(key_columns)
        self._purge = f"DELETE FROM {table} WHERE expires_at <= ?"
        self._total = f"SELECT total(size_bytes) FROM {table}"
        self._in_line = f"SELECT {keys}, size_bytes FROM {table} ORDER BY {evict_order}"
        matches = " AND ".join(f"{column} = ?" for column in key_columns)
        self._delete = f"DELETE FROM {table} WHERE {matches}"
        self._approx_bytes = 0.0
        self._puts_since_purge = 0

    @property
    def approx_bytes(self) -> float:
        return self._approx_bytes

    def recount(self, conn: sqlite3.Connection) -> None:
        """Reads the table's total (at open: what earlier runs left in the file)."""
        self._approx_bytes = conn.execute(self._total).fetchone()[0]

    def note_put(self, conn: sqlite3.Connection, size_bytes: int, now: float) -> None:
        """After a row of ``size_bytes`` was written at ``now``: purges or evicts if due."""
        self._approx_bytes += size_bytes
        self._puts_since_purge += 1
        if self._puts_since_purge >= self._purge_every_puts:
            self._puts_since_purge = 0
            conn.execute(self._purge, (now,))
            self.recount(conn)
        if self._approx_bytes > self.max_bytes:
            self._evict(conn, now)

    def _evict(self, conn: sqlite3.Connection, now: float) -> None:
        """Purges expired rows, then the first in line down to the low-water mark."""
        with transaction(conn, is_immediate=True):
            conn.execute(self._purge, (now,))
            total_bytes = conn.execute(self._total).fetchone()[0]
            target_bytes = self.max_bytes * _LOW_WATER_FRACTION
            victims: list[tuple[object, ...]] = []
            if total_bytes > self.max_bytes:
                for *key, size_bytes in conn.execute(self._in_line):
                    if total_bytes <= target_bytes:
                        break
                    victims.append(tuple(key))
                    total_bytes -= size_bytes
            conn.executemany(self._delete, victims)
        self._approx_bytes = total_bytes
