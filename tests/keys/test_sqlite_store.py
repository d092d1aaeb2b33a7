"""hasten.keys.sqlite_store: keys survive a restart; a damaged row is refused, not trusted."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hasten.config.limits import KeyLimits
from hasten.errors import DamagedKeyRecord, KeyStoreUnavailable
from hasten.keys.codec import encode
from hasten.keys.record import KeyRecord, new_record
from hasten.keys.sqlite_store import SqliteKeyStore


def _new(name: str = "n") -> KeyRecord:
    return new_record("team-a", name, None, KeyLimits(5), now_s=1.0)[0]


async def _stored(path: Path, *records: KeyRecord) -> None:
    store = SqliteKeyStore(path)
    for record in records:
        assert await store.add(record, max_keys=10)
    await store.aclose()


def _edit(path: Path, sql: str, *params: object) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(sql, params)


async def test_keys_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "keys.sqlite3"
    record = _new()
    await _stored(path, record)
    reopened = SqliteKeyStore(path)
    assert await reopened.find(record.secret_sha256) == record
    assert await reopened.list_all() == [record]
    await reopened.aclose()


async def test_a_flipped_byte_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "keys.sqlite3"
    damaged, sound = _new("damaged"), _new("sound")
    await _stored(path, damaged, sound)
    raw = bytearray(encode(damaged))
    raw[-5] ^= 0x20  # inside the JSON payload: the checksum no longer matches
    _edit(path, "UPDATE virtual_keys SET record = ? WHERE id = ?", bytes(raw), damaged.key_id)
    store = SqliteKeyStore(path)
    with pytest.raises(DamagedKeyRecord):
        await store.find(damaged.secret_sha256)
    with pytest.raises(DamagedKeyRecord):
        await store.get(damaged.key_id)
    assert await store.list_all() == [sound]  # left out, and the others still listed
    await store.aclose()


async def test_a_row_pointing_another_digest_at_a_record_is_refused(tmp_path: Path) -> None:
    """A valid record under someone else's digest: the row's columns must agree with it."""
    path = tmp_path / "keys.sqlite3"
    victim, other = _new("victim"), _new("other")
    await _stored(path, victim, other)
    _edit(path, "UPDATE virtual_keys SET digest = NULL WHERE id = ?", other.key_id)
    _edit(
        path,
        "UPDATE virtual_keys SET digest = ? WHERE id = ?",
        other.secret_sha256,
        victim.key_id,
    )
    store = SqliteKeyStore(path)
    with pytest.raises(DamagedKeyRecord):
        await store.find(other.secret_sha256)
    await store.aclose()


async def test_a_revoked_record_still_indexed_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "keys.sqlite3"
    record = _new()
    await _stored(path, record)
    revoked = record.revoked()
    _edit(path, "UPDATE virtual_keys SET record = ? WHERE id = ?", encode(revoked), record.key_id)
    store = SqliteKeyStore(path)
    with pytest.raises(DamagedKeyRecord):
        await store.find(record.secret_sha256)
    await store.aclose()


async def test_an_unusable_file_is_unavailable_not_a_crash(tmp_path: Path) -> None:
    directory = tmp_path / "a-directory"
    directory.mkdir()
    store = SqliteKeyStore(directory)  # a directory, not a database file
    with pytest.raises(KeyStoreUnavailable) as caught:
        await store.find(b"\x00" * 32)
    assert caught.value.status_code == 503
    await store.aclose()
