"""hasten.keys.redis_store against a real redis-server: damaged records and Redis away."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from hasten.config.fleet import FleetConfig
from hasten.config.limits import KeyLimits
from hasten.errors import DamagedKeyRecord, KeyStoreUnavailable
from hasten.fleet.link import FleetLink
from hasten.keys.codec import encode
from hasten.keys.record import new_record
from hasten.keys.redis_store import RedisKeyStore
from tests.support.servers import free_port


@pytest.fixture
async def link(redis_url: str) -> AsyncIterator[FleetLink]:
    prefix = f"test:{uuid.uuid4().hex}:"
    fleet = FleetLink(FleetConfig(redis_url=redis_url, key_prefix=prefix))
    yield fleet
    await fleet.aclose()


async def test_keys_live_under_the_fleet_prefix(link: FleetLink) -> None:
    store = RedisKeyStore(link)
    record = new_record("t", "n", None, KeyLimits(), now_s=0.0)[0]
    await store.add(record, max_keys=5)
    names = {name.decode() async for name in link.client.scan_iter(match=link.prefix + "*")}
    assert names == {link.key("keys", "records"), link.key("keys", "digests")}
    stored = await link.client.hget(link.key("keys", "records"), record.key_id)
    assert stored == encode(record)


async def test_a_damaged_record_is_refused(link: FleetLink) -> None:
    store = RedisKeyStore(link)
    record = new_record("t", "n", None, KeyLimits(), now_s=0.0)[0]
    await store.add(record, max_keys=5)
    damaged = encode(record).replace(b'"tenant":"t"', b'"tenant":"u"')
    await link.client.hset(link.key("keys", "records"), record.key_id, damaged)
    with pytest.raises(DamagedKeyRecord):
        await store.find(record.secret_sha256)
    with pytest.raises(DamagedKeyRecord):
        await store.get(record.key_id)
    assert await store.list_all() == []


async def test_an_index_pointing_at_another_record_is_refused(link: FleetLink) -> None:
    store = RedisKeyStore(link)
    first = new_record("t", "a", None, KeyLimits(), now_s=0.0)[0]
    second = new_record("t", "b", None, KeyLimits(), now_s=0.0)[0]
    await store.add(first, max_keys=5)
    await store.add(second, max_keys=5)
    await link.client.hset(link.key("keys", "digests"), second.secret_sha256.hex(), first.key_id)
    with pytest.raises(DamagedKeyRecord):
        await store.find(second.secret_sha256)


async def test_redis_away_is_unavailable() -> None:
    config = FleetConfig(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    link = FleetLink(config)
    store = RedisKeyStore(link)
    with pytest.raises(KeyStoreUnavailable) as caught:
        await store.find(b"\x00" * 32)
    assert caught.value.status_code == 503
    with pytest.raises(KeyStoreUnavailable):  # backing off: refused at once
        await store.list_all()
    await link.aclose()
