"""The stores of hasten.responses, each against the same rules: tenant-scoped records, expiry,
a bound per record and in all (the oldest go first), a damaged row a miss (never a crash)."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from hasten.config.fleet import FleetConfig
from hasten.fleet.link import FleetLink
from hasten.responses.record import StoredResponse, encode
from hasten.responses.redis_store import RedisResponseStore
from hasten.responses.sqlite_store import SQLiteResponseStore
from hasten.responses.store import MemoryResponseStore, ResponseStore

KINDS = ("memory", "sqlite", "redis")


class Clock:
    def __init__(self, now_s: float = 1_000_000.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def record(
    response_id: str,
    tenant: str = "team-a",
    *,
    text: str = "hello",
    created_s: float = 1_000_000.0,
    ttl_s: float = 3600.0,
) -> StoredResponse:
    return StoredResponse(
        tenant=tenant,
        response_id=response_id,
        model="m",
        input_items=[{"type": "message", "role": "user", "content": text}],
        previous_response_id=None,
        response={"id": response_id, "object": "response", "status": "completed", "output": []},
        created_s=created_s,
        expires_s=created_s + ttl_s,
    )


SIZE = len(encode(record("resp_0000")))


@pytest.fixture
async def make_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[..., ResponseStore]]:
    made: list[ResponseStore] = []
    links: list[FleetLink] = []

    def build(
        kind: str,
        *,
        max_bytes: int = 1 << 30,
        clock: Clock | None = None,
        max_record_bytes: int = 4096,
    ) -> ResponseStore:
        clock = clock or Clock()
        store: ResponseStore
        if kind == "memory":
            store = MemoryResponseStore(
                max_bytes=max_bytes, max_record_bytes=max_record_bytes, clock=clock
            )
        elif kind == "sqlite":
            path = tmp_path / f"{uuid.uuid4().hex}.sqlite3"
            store = SQLiteResponseStore(
                path, max_bytes=max_bytes, max_record_bytes=max_record_bytes, clock=clock
            )
        else:
            url = request.getfixturevalue("redis_url")
            link = FleetLink(FleetConfig(redis_url=url, key_prefix=f"t:{uuid.uuid4().hex}:"))
            links.append(link)
            store = RedisResponseStore(
                link, max_bytes=max_bytes, max_record_bytes=max_record_bytes, clock=clock
            )
        made.append(store)
        return store

    yield build
    for store in made:
        await store.aclose()
    for link in links:
        await link.aclose()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_record_is_its_tenants_only(
    make_store: Callable[..., ResponseStore], kind: str
) -> None:
    store = make_store(kind)
    kept = record("resp_1")
    assert await store.put(kept)
    assert await store.get("team-a", "resp_1") == kept
    assert await store.get("team-b", "resp_1") is None
    assert not await store.delete("team-b", "resp_1")
    assert await store.delete("team-a", "resp_1")
    assert await store.get("team-a", "resp_1") is None
    assert not await store.delete("team-a", "resp_1")


@pytest.mark.parametrize("kind", ("memory", "sqlite"))
async def test_an_expired_record_is_a_miss(
    make_store: Callable[..., ResponseStore], kind: str
) -> None:
    clock = Clock()
    store = make_store(kind, clock=clock)
    assert await store.put(record("resp_1", ttl_s=60.0))
    clock.now_s += 59.0
    assert await store.get("team-a", "resp_1") is not None
    clock.now_s += 2.0
    assert await store.get("team-a", "resp_1") is None


async def test_redis_drops_a_record_when_it_expires(
    make_store: Callable[..., ResponseStore],
) -> None:
    clock = Clock(0.0)
    store = make_store("redis", clock=clock)
    # Redis's own clock expires it: 0.2 s after the write, whatever the record's dates.
    assert await store.put(record("resp_1", created_s=0.0, ttl_s=0.2))
    for _ in range(200):
        if await store.get("team-a", "resp_1") is None:
            break
        await asyncio.sleep(0.05)
    assert await store.get("team-a", "resp_1") is None
    assert not await store.put(record("resp_2", created_s=-10.0, ttl_s=5.0))  # expired already


@pytest.mark.parametrize("kind", KINDS)
async def test_a_record_past_its_bound_is_not_kept(
    make_store: Callable[..., ResponseStore], kind: str
) -> None:
    store = make_store(kind)
    assert not await store.put(record("resp_big", text="x" * 5000))
    assert await store.get("team-a", "resp_big") is None


@pytest.mark.parametrize("kind", KINDS)
async def test_the_oldest_records_go_first_past_the_total(
    make_store: Callable[..., ResponseStore], kind: str
) -> None:
    store = make_store(kind, max_bytes=SIZE * 3 + SIZE // 2)
    for n in range(6):
        assert await store.put(record(f"resp_{n:04d}", created_s=1_000_000.0 + n))
    kept = [n for n in range(6) if await store.get("team-a", f"resp_{n:04d}") is not None]
    assert kept and kept == list(range(6 - len(kept), 6)), kept  # the newest, in a row
    assert len(kept) <= 3
    assert 5 in kept


async def test_sqlite_a_damaged_row_is_a_miss_and_dropped(
    make_store: Callable[..., ResponseStore],
) -> None:
    store = make_store("sqlite")
    assert isinstance(store, SQLiteResponseStore)
    assert await store.put(record("resp_1"))
    assert await store.put(record("resp_2"))
    with sqlite3.connect(store.path) as conn:
        conn.execute(
            "UPDATE hasten_responses_v1 SET value = substr(value, 1, 80) WHERE id = 'resp_1'"
        )
        # A whole, valid row of another tenant moved under this tenant's key.
        conn.execute("UPDATE hasten_responses_v1 SET tenant = 'team-b' WHERE id = 'resp_2'")
    assert await store.get("team-a", "resp_1") is None
    assert store.num_damaged == 1
    assert await store.get("team-b", "resp_2") is None
    assert await store.put(record("resp_1"))  # the store carries on
    assert await store.get("team-a", "resp_1") is not None


async def test_redis_a_damaged_record_is_a_miss(
    make_store: Callable[..., ResponseStore],
) -> None:
    store = make_store("redis")
    assert isinstance(store, RedisResponseStore)
    assert await store.put(record("resp_1"))
    key = store._key("team-a", "resp_1")
    await store._link.client.set(key, b"rs1:" + b"0" * 64 + b":{}", keepttl=True)
    assert await store.get("team-a", "resp_1") is None
    assert store.num_damaged == 1


async def test_redis_away_is_a_miss_and_a_dropped_write() -> None:
    from tests.support.servers import free_port

    link = FleetLink(FleetConfig(redis_url=f"redis://127.0.0.1:{free_port()}/0"))
    store = RedisResponseStore(link, max_bytes=1 << 20, max_record_bytes=4096)
    try:
        assert not await store.put(record("resp_1", created_s=0.0, ttl_s=1e12))
        assert await store.get("team-a", "resp_1") is None
        assert not await store.delete("team-a", "resp_1")
    finally:
        await link.aclose()


async def test_sqlite_records_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "responses.sqlite3"
    clock = Clock()
    first = SQLiteResponseStore(path, max_bytes=1 << 20, max_record_bytes=4096, clock=clock)
    await first.put(record("resp_1"))
    await first.aclose()
    second = SQLiteResponseStore(path, max_bytes=1 << 20, max_record_bytes=4096, clock=clock)
    try:
        assert await second.get("team-a", "resp_1") == record("resp_1")
    finally:
        await second.aclose()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_long_record_comes_back_whole(
    make_store: Callable[..., ResponseStore], kind: str
) -> None:
    """Past 256 KiB a record is parsed off the event loop (Redis's here; SQLite's always)."""
    store = make_store(kind, max_record_bytes=1 << 20)
    long = record("resp_long", text="y" * (300 * 1024))
    assert await store.put(long)
    assert await store.get("team-a", "resp_long") == long
