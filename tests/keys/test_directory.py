"""hasten.keys.directory.KeyDirectory: the store behind the request path's cache."""

from __future__ import annotations

import asyncio
import logging

import pytest

from hasten.config.limits import KeyLimits
from hasten.errors import DamagedKeyRecord, KeyStoreUnavailable
from hasten.keys.directory import KeyDirectory
from hasten.keys.lookup import ResolvedKeys
from hasten.keys.record import KeyRecord, new_record, new_secret
from hasten.keys.store import MemoryKeyStore


class CountingStore(MemoryKeyStore):
    """The memory store, counting lookups; ``failure`` makes ``find`` raise it."""

    def __init__(self) -> None:
        super().__init__()
        self.num_finds = 0
        self.failure: Exception | None = None
        self.gate: asyncio.Event | None = None

    async def find(self, digest: bytes) -> KeyRecord | None:
        self.num_finds += 1
        if self.failure is not None:
            raise self.failure
        found = await super().find(digest)  # read now, answered after the gate: a slow store
        if self.gate is not None:
            await self.gate.wait()
        return found


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


async def _setup() -> tuple[KeyDirectory, CountingStore, Clock, KeyRecord]:
    store, clock = CountingStore(), Clock()
    directory = KeyDirectory(store, ResolvedKeys(ttl_s=1.0), max_keys=10, clock=clock)
    record = new_record("team-a", "n", None, KeyLimits(3), now_s=0.0)[0]
    await store.add(record, max_keys=10)
    return directory, store, clock, record


async def test_a_warm_key_costs_no_store_lookup() -> None:
    directory, store, clock, record = await _setup()
    for _ in range(100):
        caller = await directory.resolve(record.secret_sha256)
        assert caller is not None and caller.key_id == record.key_id
    assert store.num_finds == 1
    clock.now_s = 1.0  # the TTL passed: asked again, once
    for _ in range(10):
        await directory.resolve(record.secret_sha256)
    assert store.num_finds == 2


async def test_unknown_digests_are_cached_as_unknown() -> None:
    directory, store, _, _ = await _setup()
    for _ in range(5):
        assert await directory.resolve(b"\x01" * 32) is None
    assert store.num_finds == 1


async def test_revocation_elsewhere_is_seen_within_the_ttl() -> None:
    directory, store, clock, record = await _setup()
    assert await directory.resolve(record.secret_sha256) is not None
    await store.replace(record, record.revoked())  # another replica revokes it
    clock.now_s = 0.5
    assert await directory.resolve(record.secret_sha256) is not None  # still cached
    clock.now_s = 1.0
    assert await directory.resolve(record.secret_sha256) is None


async def test_forget_is_immediate_and_beats_a_lookup_in_flight() -> None:
    directory, store, _, record = await _setup()
    store.gate = asyncio.Event()
    lookup = asyncio.ensure_future(directory.resolve(record.secret_sha256))
    for _ in range(100):  # until the lookup has read the record and waits on the gate
        if store.num_finds:
            break
        await asyncio.sleep(0)
    rotated = record.rotated(new_secret())
    await store.replace(record, rotated)
    directory.forget(record.secret_sha256)  # this replica rotated it
    store.gate.set()
    assert await lookup is not None  # it read the record before the rotation...
    store.gate = None
    assert await directory.resolve(record.secret_sha256) is None  # ...and was not cached
    assert await directory.resolve(rotated.secret_sha256) is not None


async def test_concurrent_cold_lookups_share_one() -> None:
    directory, store, _, record = await _setup()
    store.gate = asyncio.Event()
    waiters = [asyncio.ensure_future(directory.resolve(record.secret_sha256)) for _ in range(50)]
    await asyncio.sleep(0)
    waiters[0].cancel()  # one client goes away: the others still get their answer
    store.gate.set()
    results = await asyncio.gather(*waiters[1:])
    assert all(caller is not None for caller in results)
    assert store.num_finds == 1


async def test_store_away_known_keys_keep_working_unknown_get_503() -> None:
    directory, store, clock, record = await _setup()
    await directory.resolve(record.secret_sha256)
    store.failure = KeyStoreUnavailable("redis away")
    clock.now_s = 5.0
    caller = await directory.resolve(record.secret_sha256)
    assert caller is not None and caller.key_id == record.key_id
    with pytest.raises(KeyStoreUnavailable):
        await directory.resolve(b"\x02" * 32)


async def test_a_damaged_record_is_refused_and_logged_without_secrets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    directory, store, _, record = await _setup()
    store.failure = DamagedKeyRecord("virtual key 'vk_x': checksum mismatch")
    with caplog.at_level(logging.WARNING, logger="hasten.keys"):
        assert await directory.resolve(record.secret_sha256) is None
        assert await directory.resolve(record.secret_sha256) is None
    assert store.num_finds == 1 and directory.num_damaged == 1
    assert "refused" in caplog.text
    assert record.secret_sha256.hex() not in caplog.text
