"""The semantic store's upkeep: approximate size totals, guard signatures, expiry, eviction.

``SemanticCache`` owns one ``Upkeep`` and calls it on its worker thread only: whenever rows
are added or removed, so the vector index, the signature cache and the totals stay in step
with the SQLite rows, and the row count and bytes stay within the configured limits.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

from hasten.semantic.guard import TextSignature, signature
from hasten.semantic.index import VectorIndex
from hasten.semantic.records import ROW_OVERHEAD_BYTES, Records, StoredEntry
from hasten.semantic.store_config import SemanticStoreConfig

PURGE_EVERY_INSERTS = 256
# Evict down to this fraction of the limits so eviction does not run on every insert.
LOW_WATER_FRACTION = 0.9
NUM_SIGNATURES_KEPT = 65_536


class Upkeep:
    """Keeps the row count and bytes within ``config`` limits and ``index`` in step.

    ``counters`` is the store's: ``expired``, ``evicted`` and whatever reason ``remove`` is
    given count the rows removed.
    """

    def __init__(
        self,
        config: SemanticStoreConfig,
        index: VectorIndex,
        counters: Counter[str],
        *,
        dim: int,
    ) -> None:
        self._config = config
        self._index = index
        self._counters = counters
        self._bytes_per_vector = 2 * dim
        self._signatures: dict[int, TextSignature] = {}
        # Rows in the file and the bytes they take, approximately (exact after ``recount``).
        self.num_entries = 0
        self.num_bytes = 0
        self._inserts_since_purge = 0

    def recount(self, records: Records) -> None:
        """Takes the totals from the file (when it is opened)."""
        self.num_entries, self.num_bytes = records.totals()

    def signature(self, entry: StoredEntry) -> TextSignature:
        """The guard's signature of a stored question, computed once while memory allows."""
        cached = self._signatures.get(entry.entry_id)
        if cached is None:
            if len(self._signatures) >= NUM_SIGNATURES_KEPT:
                self._signatures.clear()  # cheap to recompute; keeps memory bounded
            cached = self._signatures[entry.entry_id] = signature(entry.text)
        return cached

    def note_insert(self, records: Records, text: str, now: float) -> None:
        """A row was added (and indexed): purges expired rows now and then, evicts if over."""
        self.num_entries += 1
        # Besides the text: the float16 vector, 2 bytes a dimension, and a row's overhead.
        self.num_bytes += len(text.encode()) + self._bytes_per_vector + ROW_OVERHEAD_BYTES
        self._inserts_since_purge += 1
        if self._inserts_since_purge >= PURGE_EVERY_INSERTS:
            self._inserts_since_purge = 0
            self.remove(records, records.select_where(expired_at=now), "expired")
        self._evict(records)

    def live(
        self, records: Records, entries: Iterable[StoredEntry], now: float
    ) -> list[StoredEntry]:
        """The entries a lookup found that have not expired; the expired ones are removed."""
        found = list(entries)
        expired = [(e.entry_id, e.partition) for e in found if e.expires_at <= now]
        self.remove(records, expired, "expired")
        return [entry for entry in found if entry.expires_at > now]

    def remove(self, records: Records, rows: list[tuple[int, str]], reason: str) -> None:
        """Deletes ``(entry_id, partition)`` rows from the file and the index."""
        if not rows:
            return
        records.delete(entry_id for entry_id, _ in rows)
        for entry_id, partition in rows:
            self._index.remove(partition, entry_id)
            self._signatures.pop(entry_id, None)
        self._counters[reason] += len(rows)
        # Approximate bookkeeping: a full count is O(entries); _evict re-counts when it acts.
        average_bytes = self.num_bytes / max(1, self.num_entries)
        self.num_entries = max(0, self.num_entries - len(rows))
        self.num_bytes = max(0, int(self.num_bytes - average_bytes * len(rows)))

    def _evict(self, records: Records) -> None:
        config = self._config
        if self.num_entries <= config.max_entries and self.num_bytes <= config.max_bytes:
            return
        self.recount(records)
        target_entries = int(config.max_entries * LOW_WATER_FRACTION)
        over_entries = self.num_entries - target_entries
        average_bytes = self.num_bytes / max(1, self.num_entries)
        over_bytes = (self.num_bytes - config.max_bytes * LOW_WATER_FRACTION) / average_bytes
        # Rounded up: rounding down left the file up to a row above the low-water mark, and
        # with rows large next to max_bytes, above max_bytes itself.
        num_victims = math.ceil(max(over_entries, over_bytes, 0))
        if num_victims > 0:
            self.remove(records, records.select_victims(num_victims), "evicted")
