"""The key stores' shared contract, against the memory, SQLite and Redis stores alike."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hasten.config.fleet import FleetConfig
from hasten.config.limits import KeyLimits
from hasten.fleet.link import FleetLink
from hasten.keys.record import KeyRecord, new_record, new_secret
from hasten.keys.redis_store import RedisKeyStore
from hasten.keys.sqlite_store import SqliteKeyStore
from hasten.keys.store import KeyStore, MemoryKeyStore


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, redis_url: str
) -> AsyncIterator[KeyStore]:
    built: KeyStore
    link = None
    if request.param == "memory":
        built = MemoryKeyStore()
    elif request.param == "sqlite":
        built = SqliteKeyStore(tmp_path / "keys.sqlite3")
    else:
        prefix = f"test:{request.node.name}:{tmp_path.name}:"
        link = FleetLink(FleetConfig(redis_url=redis_url, key_prefix=prefix))
        built = RedisKeyStore(link)
    yield built
    await built.aclose()
    if link is not None:
        await link.aclose()


def _new(tenant: str = "team-a") -> tuple[KeyRecord, str]:
    return new_record(tenant, "n", frozenset({"m"}), KeyLimits(7), now_s=100.0)


async def test_add_find_get(store: KeyStore) -> None:
    record, _ = _new()
    assert await store.add(record, max_keys=10)
    assert await store.find(record.secret_sha256) == record
    assert await store.get(record.key_id) == record
    assert await store.find(b"\x00" * 32) is None
    assert await store.get("vk_0000000000000000") is None


async def test_max_keys_is_a_hard_bound(store: KeyStore) -> None:
    for _ in range(3):
        assert await store.add(_new()[0], max_keys=3)
    assert not await store.add(_new()[0], max_keys=3)
    assert len(await store.list_all()) == 3


async def test_list_is_oldest_first(store: KeyStore) -> None:
    records = []
    for i in range(4):
        record = new_record("t", str(i), None, KeyLimits(), now_s=float(i))[0]
        records.append(record)
        await store.add(record, max_keys=10)
    assert await store.list_all() == records


async def test_rotation_moves_the_index(store: KeyStore) -> None:
    record, _ = _new()
    await store.add(record, max_keys=10)
    rotated = record.rotated(new_secret())
    assert await store.replace(record, rotated)
    assert await store.find(record.secret_sha256) is None
    assert await store.find(rotated.secret_sha256) == rotated
    assert await store.get(record.key_id) == rotated


async def test_replace_is_a_compare_and_swap(store: KeyStore) -> None:
    record, _ = _new()
    await store.add(record, max_keys=10)
    first, second = record.rotated(new_secret()), record.rotated(new_secret())
    assert await store.replace(record, first)
    assert not await store.replace(record, second)  # the second writer read a stale record
    assert await store.find(second.secret_sha256) is None
    assert await store.get(record.key_id) == first


async def test_a_revoked_key_is_never_found(store: KeyStore) -> None:
    record, _ = _new()
    await store.add(record, max_keys=10)
    revoked = record.revoked()
    assert await store.replace(record, revoked)
    assert await store.find(record.secret_sha256) is None
    assert await store.get(record.key_id) == revoked
    assert await store.list_all() == [revoked]
