"""The store's upkeep on its own: totals, signatures, expiry purges and eviction."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hasten.semantic.guard import signature
from hasten.semantic.index import VectorIndex
from hasten.semantic.records import Records, Row
from hasten.semantic.store_config import SemanticStoreConfig
from hasten.semantic.upkeep import LOW_WATER_FRACTION, PURGE_EVERY_INSERTS, Upkeep

DIM = 4
PARTITION = "p"


class Store:
    """Records and an index as the store keeps them, with the upkeep under test."""

    def __init__(self, path: Path, **limits: Any) -> None:
        self.records = Records(path / "semantic.sqlite3")
        self.index = VectorIndex(DIM)
        self.counters: Counter[str] = Counter()
        config = SemanticStoreConfig(path=path / "semantic.sqlite3", **limits)
        self.upkeep = Upkeep(config, self.index, self.counters, dim=DIM)

    def add(self, text: str, *, now: float = 0.0, ttl_s: float = 1e9) -> int:
        vector = np.full(DIM, 0.5, dtype=np.float32)
        row = Row(PARTITION, "t", "m", text, f"k-{text}", now, now + ttl_s)
        entry_id = self.records.insert(row, vector)
        self.index.add(PARTITION, entry_id, vector)
        self.upkeep.note_insert(self.records, text, now)
        return entry_id

    def ids(self) -> set[int]:
        return {entry_id for entry_id, _ in self.records.select_where()}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    made = Store(tmp_path, max_entries=10)
    yield made
    made.records.close()


def test_totals_follow_inserts_and_removals(store: Store) -> None:
    ids = [store.add(f"question {n}") for n in range(4)]
    assert store.upkeep.num_entries == 4
    per_row = store.upkeep.num_bytes / 4
    assert per_row > len("question 0") + 2 * DIM  # text, float16 vector and row overhead
    store.upkeep.remove(store.records, [(ids[0], PARTITION)], "invalidated")
    assert store.ids() == set(ids[1:])
    assert store.index.partition_size(PARTITION) == 3
    assert store.counters["invalidated"] == 1
    assert store.upkeep.num_entries == 3
    assert store.upkeep.num_bytes == pytest.approx(3 * per_row)
    store.upkeep.remove(store.records, [], "invalidated")  # nothing to do, nothing counted
    assert store.counters["invalidated"] == 1


def test_recount_takes_the_file_totals(tmp_path: Path) -> None:
    first = Store(tmp_path)
    for n in range(3):
        first.add(f"question {n}")
    first.records.close()
    again = Store(tmp_path)  # a new process on the same file knows nothing yet
    assert again.upkeep.num_entries == 0
    again.upkeep.recount(again.records)
    assert (again.upkeep.num_entries, again.upkeep.num_bytes) == again.records.totals()
    assert again.upkeep.num_entries == 3
    again.records.close()


def test_eviction_goes_down_to_the_low_water_mark(store: Store) -> None:
    ids = [store.add(f"question {n}", now=float(n)) for n in range(10)]
    assert store.counters["evicted"] == 0  # at the limit is within it
    store.add("one too many", now=10.0)
    kept = int(10 * LOW_WATER_FRACTION)
    assert len(store.ids()) == kept and store.upkeep.num_entries == kept
    assert store.counters["evicted"] == 11 - kept
    assert not store.ids() & set(ids[:2])  # the least recently used went first
    assert store.index.partition_size(PARTITION) == kept


def test_eviction_by_bytes(tmp_path: Path) -> None:
    store = Store(tmp_path, max_bytes=2_000)
    num_added = 0
    while not store.counters["evicted"] and num_added < 100:  # ~290 bytes a row
        store.add(f"question {num_added}", now=float(num_added))
        num_added += 1
    assert store.counters["evicted"]
    # Down to the low-water mark (rows of one size here: the count of victims is exact),
    # and so under the limit itself.
    num_rows, num_bytes = store.records.totals()
    assert num_bytes <= 2_000 * LOW_WATER_FRACTION < 2_000
    assert num_rows == num_added - store.counters["evicted"]
    assert not store.records.has(1)  # the least recently used went first
    store.records.close()


def test_expired_rows_are_purged_every_so_many_inserts(tmp_path: Path) -> None:
    store = Store(tmp_path)
    stale = store.add("stale question", now=0.0, ttl_s=1.0)
    for n in range(PURGE_EVERY_INSERTS - 2):
        store.add(f"question {n}", now=5.0)
    assert stale in store.ids()  # nobody looked: it stays until the purge
    store.add("the purging insert", now=5.0)
    assert stale not in store.ids()
    assert store.counters["expired"] == 1
    store.records.close()


def test_live_removes_what_a_lookup_found_expired(store: Store) -> None:
    old = store.add("old question", ttl_s=1.0)
    fresh = store.add("fresh question")
    found = store.records.entries([old, fresh]).values()
    live = store.upkeep.live(store.records, found, now=2.0)
    assert [entry.entry_id for entry in live] == [fresh]
    assert store.upkeep.live(store.records, [], now=2.0) == []
    assert old not in store.ids() and store.counters["expired"] == 1


def test_signatures_are_kept_until_the_entry_is_removed(store: Store) -> None:
    entry_id = store.add("how many moons does Mars have")
    entry = store.records.entries([entry_id])[entry_id]
    first = store.upkeep.signature(entry)
    assert first == signature(entry.text)
    assert store.upkeep.signature(entry) is first  # computed once
    store.upkeep.remove(store.records, [(entry_id, PARTITION)], "invalidated")
    assert store.upkeep.signature(entry) is not first
