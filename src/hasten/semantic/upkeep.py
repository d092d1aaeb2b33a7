"""The semantic store's upkeep: approximate size totals, guard signatures, expiry, eviction.

Mixed into ``SemanticCache`` (kept apart so the store stays readable); worker thread only.
"""

from __future__ import annotations

from collections import Counter

from hasten.semantic.guard import TextSignature, signature
from hasten.semantic.index import VectorIndex
from hasten.semantic.records import Records, StoredEntry
from hasten.semantic.settings import SemanticConfig

_PURGE_EVERY_INSERTS = 256
# Evict down to this fraction of the limits so eviction does not run on every insert.
_LOW_WATER_FRACTION = 0.9
_NUM_SIGNATURES_KEPT = 65_536


class Upkeep:
    """Keeps the row count and bytes within ``config`` limits and the in-memory state in step."""

    config: SemanticConfig
    counters: Counter[str]
    _index: VectorIndex
    _dim: int
    _signatures: dict[int, TextSignature]
    _num_entries: int
    _num_bytes: int
    _inserts_since_purge: int

    def _start_upkeep(self) -> None:
        self._signatures = {}
        self._num_entries = 0
        self._num_bytes = 0
        self._inserts_since_purge = 0

    def _signature(self, entry: StoredEntry) -> TextSignature:
        cached = self._signatures.get(entry.entry_id)
        if cached is None:
            if len(self._signatures) >= _NUM_SIGNATURES_KEPT:
                self._signatures.clear()  # cheap to recompute; keeps memory bounded
            cached = self._signatures[entry.entry_id] = signature(entry.text)
        return cached

    def _note_insert(self, records: Records, text: str, now: float) -> None:
        self._num_entries += 1
        self._num_bytes += len(text.encode()) + 2 * self._dim + 256
        self._inserts_since_purge += 1
        if self._inserts_since_purge >= _PURGE_EVERY_INSERTS:
            self._inserts_since_purge = 0
            self._remove(records, records.select_where(expired_at=now), "expired")
        self._evict(records)

    def _evict(self, records: Records) -> None:
        if (
            self._num_entries <= self.config.max_entries
            and self._num_bytes <= self.config.max_bytes
        ):
            return
        self._num_entries, self._num_bytes = records.totals()
        target_entries = int(self.config.max_entries * _LOW_WATER_FRACTION)
        over_entries = self._num_entries - target_entries
        average_bytes = self._num_bytes / max(1, self._num_entries)
        over_bytes = (self._num_bytes - self.config.max_bytes * _LOW_WATER_FRACTION) / average_bytes
        num_victims = int(max(over_entries, over_bytes, 0))
        if num_victims > 0:
            victims = records.select_victims(policy=self.config.eviction, num_rows=num_victims)
            self._remove(records, victims, "evicted")

    def _drop_expired(self, records: Records, expired: list[StoredEntry]) -> None:
        if expired:
            self._remove(records, [(e.entry_id, e.partition) for e in expired], "expired")

    def _remove(self, records: Records, rows: list[tuple[int, str]], reason: str) -> None:
        if not rows:
            return
        records.delete(entry_id for entry_id, _ in rows)
        for entry_id, partition in rows:
            self._index.remove(partition, entry_id)
            self._signatures.pop(entry_id, None)
        self.counters[reason] += len(rows)
        # Approximate bookkeeping: a full count is O(entries); _evict re-counts when it acts.
        average_bytes = self._num_bytes / max(1, self._num_entries)
        self._num_entries = max(0, self._num_entries - len(rows))
        self._num_bytes = max(0, int(self._num_bytes - average_bytes * len(rows)))
