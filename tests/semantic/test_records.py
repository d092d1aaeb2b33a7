"""The semantic cache's SQLite file: files written by earlier releases open and serve."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from hasten.semantic.records import Records, Row
from tests.support.semantic import chat, make_cache

_V1_SCHEMA = """
CREATE TABLE hasten_semantic_v1 (
    id INTEGER PRIMARY KEY, partition TEXT NOT NULL, tenant TEXT NOT NULL,
    model TEXT NOT NULL, text TEXT NOT NULL, vector BLOB NOT NULL, answer_key TEXT NOT NULL,
    created_at REAL NOT NULL, expires_at REAL NOT NULL, accessed_at REAL NOT NULL,
    num_hits INTEGER NOT NULL DEFAULT 0, size_bytes INTEGER NOT NULL, observations BLOB
);
"""
# As written before issue 40 removed answer classes and LFU eviction: an ``answer_class``
# column (a row that joined another's class holds that row's id) and LFU's index.
_CLASSES_SCHEMA = """
CREATE TABLE hasten_semantic_v1 (
    id INTEGER PRIMARY KEY, partition TEXT NOT NULL, tenant TEXT NOT NULL,
    model TEXT NOT NULL, text TEXT NOT NULL, vector BLOB NOT NULL, answer_key TEXT NOT NULL,
    created_at REAL NOT NULL, expires_at REAL NOT NULL, accessed_at REAL NOT NULL,
    num_hits INTEGER NOT NULL DEFAULT 0, size_bytes INTEGER NOT NULL, observations BLOB,
    answer_class INTEGER, text_key INTEGER
);
CREATE INDEX hasten_semantic_v1_hits ON hasten_semantic_v1 (num_hits, accessed_at);
CREATE TABLE hasten_semantic_v1_meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
"""


def test_records_without_the_text_key_are_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript(_V1_SCHEMA)
    blob = np.ones(4, dtype=np.float16).tobytes()
    conn.execute(
        "INSERT INTO hasten_semantic_v1 (id, partition, tenant, model, text, vector,"
        " answer_key, created_at, expires_at, accessed_at, size_bytes)"
        " VALUES (7, 'p', 't', 'm', 'q', ?, 'k', 0, 9e9, 0, 1)",
        (blob,),
    )
    conn.commit()
    conn.close()
    records = Records(path)
    assert records.entries([7])[7].answer_key == "k"
    new = records.insert(Row("p", "t", "m", "q2", "k2", 0.0, 9e9), np.ones(4, dtype=np.float32))
    assert records.entries_with_text("p", "q2")[0].entry_id == new
    records.close()
    reopened = Records(path)  # the column is there now: nothing to add
    assert set(reopened.entries([7, new])) == {7, new}
    reopened.close()


async def test_a_file_with_answer_classes_still_serves(tmp_path: Path) -> None:
    path = tmp_path / "semantic.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript(_CLASSES_SCHEMA)
    conn.commit()
    conn.close()
    cache = make_cache(tmp_path)  # written by this code into the old table
    first = await cache.insert(chat("how do i cook rice"), model="m", tenant="t", answer_key="k1")
    second = await cache.insert(chat("capital of peru"), model="m", tenant="t", answer_key="k2")
    await cache.close()
    conn = sqlite3.connect(path)  # what a join made: the second row in the first's class
    conn.execute("UPDATE hasten_semantic_v1 SET answer_class = ? WHERE id = ?", (first, second))
    conn.commit()
    conn.close()
    again = make_cache(tmp_path)
    match = await again.lookup(chat("how do I COOK rice"), model="m", tenant="t")
    assert match is not None and match.answer_key == "k1"
    match = await again.lookup(chat("capital of Peru"), model="m", tenant="t")
    assert match is not None and match.answer_key == "k2"
    assert await again.insert(chat("tallest mountain"), model="m", tenant="t", answer_key="k3")
    assert await again.invalidate(entry_id=second) == 1
    assert again.stats()["entries"] == 2
    await again.close()
    conn = sqlite3.connect(path)
    indexes = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "hasten_semantic_v1_hits" not in indexes  # LFU's order: no hit pays for it now
